# trawl on AWS: the store's bucket, Kafka, one IAM role per stage, and optionally nodes.
# The outputs fill the k8s overlay (docs/operations.md, "From Terraform to a running cluster").

module "bucket" {
  source          = "./modules/bucket"
  bucket_name     = var.bucket_name
  noncurrent_days = var.noncurrent_days
  kms_key_arn     = var.kms_key_arn
  tags            = var.tags
}

module "kafka" {
  source                    = "./modules/kafka"
  create                    = var.create_kafka
  name                      = var.name
  existing_bootstrap_brokers = var.existing_kafka_bootstrap_brokers
  vpc_id                    = var.vpc_id
  vpc_cidr                  = var.vpc_cidr
  subnet_ids                = var.subnet_ids
  instance_type             = var.kafka_instance_type
  broker_count              = var.kafka_broker_count
  volume_gb                 = var.kafka_volume_gb
  tags                      = var.tags
}

module "iam" {
  source            = "./modules/iam"
  name              = var.name
  bucket_arn        = module.bucket.arn
  store_prefix      = var.store_prefix
  kms_key_arn       = var.kms_key_arn
  oidc_provider_arn = var.eks_oidc_provider_arn
  oidc_issuer       = var.eks_oidc_issuer
  namespace         = var.namespace
  tags              = var.tags
}

module "nodes" {
  source         = "./modules/eks-nodes"
  create         = var.create_node_group
  name           = var.name
  cluster_name   = var.eks_cluster_name
  subnet_ids     = var.subnet_ids
  instance_types = var.node_instance_types
  min_size       = var.node_min
  max_size       = var.node_max
  tags           = var.tags
}
