variable "region" {
  type        = string
  description = "AWS region of the bucket, the Kafka cluster and the roles."
}

variable "name" {
  type        = string
  description = "Prefix of every resource name, e.g. trawl-prod."
}

variable "bucket_name" {
  type        = string
  description = "Name of the S3 bucket holding the store (globally unique)."
}

variable "store_prefix" {
  type        = string
  default     = "org"
  description = "Key prefix of the store inside the bucket: store.url = s3://<bucket_name>/<store_prefix>."
}

variable "noncurrent_days" {
  type        = number
  default     = 14
  description = "Days a deleted or overwritten object (an old generation collected by trawl compact --gc) is kept as a noncurrent version before it expires."
}

variable "kms_key_arn" {
  type        = string
  default     = null
  description = "KMS key for the bucket's encryption; null: SSE-S3 (AES-256)."
}

variable "vpc_id" {
  type        = string
  description = "VPC of the EKS cluster (and of the MSK cluster when one is created)."
}

variable "vpc_cidr" {
  type        = string
  description = "CIDR of that VPC: the Kafka listeners accept it; the k8s NetworkPolicy trawl-egress-kafka names it."
}

variable "subnet_ids" {
  type        = list(string)
  description = "Private subnets, one per availability zone, for the MSK brokers and the node group."
}

variable "create_kafka" {
  type        = bool
  default     = true
  description = "Create an MSK cluster; false: use existing_kafka_bootstrap_brokers."
}

variable "existing_kafka_bootstrap_brokers" {
  type        = string
  default     = ""
  description = "Bootstrap brokers (host:port,...) of an existing Kafka cluster, when create_kafka is false."
}

variable "kafka_instance_type" {
  type        = string
  default     = "kafka.m7g.large"
  description = "MSK broker instance type."
}

variable "kafka_broker_count" {
  type        = number
  default     = 3
  description = "MSK brokers (a multiple of the number of subnets)."
}

variable "kafka_volume_gb" {
  type        = number
  default     = 200
  description = "EBS storage per broker, GiB."
}

variable "eks_oidc_provider_arn" {
  type        = string
  description = "ARN of the EKS cluster's IAM OIDC provider (IAM roles for service accounts)."
}

variable "eks_oidc_issuer" {
  type        = string
  description = "The EKS cluster's OIDC issuer without https://, e.g. oidc.eks.eu-west-1.amazonaws.com/id/ABC."
}

variable "namespace" {
  type        = string
  default     = "trawl"
  description = "Kubernetes namespace of the trawl service accounts (the k8s overlay's namespace)."
}

variable "create_node_group" {
  type        = bool
  default     = false
  description = "Create an EKS managed node group for trawl; false: run on the cluster's existing nodes."
}

variable "eks_cluster_name" {
  type        = string
  default     = ""
  description = "EKS cluster name, for the node group."
}

variable "node_instance_types" {
  type        = list(string)
  default     = ["m7i.2xlarge"]
  description = "Instance types of the node group (query and compactor pods request 6 GiB each)."
}

variable "node_min" {
  type        = number
  default     = 2
  description = "Node group minimum size."
}

variable "node_max" {
  type        = number
  default     = 10
  description = "Node group maximum size."
}

variable "tags" {
  type        = map(string)
  default     = {}
  description = "Tags on every resource."
}
