variable "create" {
  type        = bool
  default     = true
  description = "Create an MSK cluster; false: pass existing_bootstrap_brokers."
}

variable "name" {
  type        = string
  description = "Cluster name."
}

variable "existing_bootstrap_brokers" {
  type        = string
  default     = ""
  description = "Bootstrap brokers of an existing cluster (when create is false)."
}

variable "kafka_version" {
  type        = string
  default     = "3.7.x"
  description = "MSK Kafka version."
}

variable "vpc_id" {
  type        = string
  description = "VPC of the brokers."
}

variable "vpc_cidr" {
  type        = string
  description = "CIDR allowed to the TLS listener."
}

variable "subnet_ids" {
  type        = list(string)
  description = "Client subnets, one per availability zone."
}

variable "instance_type" {
  type        = string
  default     = "kafka.m7g.large"
  description = "Broker instance type."
}

variable "broker_count" {
  type        = number
  default     = 3
  description = "Brokers."
}

variable "volume_gb" {
  type        = number
  default     = 200
  description = "EBS GiB per broker."
}

variable "tags" {
  type        = map(string)
  default     = {}
  description = "Tags."
}
