variable "create" {
  type        = bool
  default     = false
  description = "Create the node group."
}

variable "name" {
  type        = string
  description = "Name prefix."
}

variable "cluster_name" {
  type        = string
  default     = ""
  description = "EKS cluster name."
}

variable "subnet_ids" {
  type        = list(string)
  description = "Subnets of the nodes."
}

variable "instance_types" {
  type        = list(string)
  default     = ["m7i.2xlarge"]
  description = "Instance types."
}

variable "min_size" {
  type        = number
  default     = 2
  description = "Minimum (and initial) nodes."
}

variable "max_size" {
  type        = number
  default     = 10
  description = "Maximum nodes."
}

variable "tags" {
  type        = map(string)
  default     = {}
  description = "Tags."
}
