variable "name" {
  type        = string
  description = "Role name prefix: roles are <name>-<stage>."
}

variable "bucket_arn" {
  type        = string
  description = "ARN of the store's bucket."
}

variable "store_prefix" {
  type        = string
  default     = "org"
  description = "Key prefix of the store in the bucket."
}

variable "kms_key_arn" {
  type        = string
  default     = null
  description = "KMS key of the bucket, if SSE-KMS."
}

variable "oidc_provider_arn" {
  type        = string
  description = "ARN of the EKS cluster's IAM OIDC provider."
}

variable "oidc_issuer" {
  type        = string
  description = "OIDC issuer host and path, without https://."
}

variable "namespace" {
  type        = string
  default     = "trawl"
  description = "Namespace of the service accounts trawl-<stage>."
}

variable "tags" {
  type        = map(string)
  default     = {}
  description = "Tags."
}
