variable "bucket_name" {
  type        = string
  description = "Name of the bucket."
}

variable "noncurrent_days" {
  type        = number
  default     = 14
  description = "Days before a noncurrent object version expires."
}

variable "kms_key_arn" {
  type        = string
  default     = null
  description = "KMS key for SSE-KMS; null: SSE-S3."
}

variable "tags" {
  type        = map(string)
  default     = {}
  description = "Tags."
}
