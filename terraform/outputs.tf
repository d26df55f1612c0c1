output "bucket_name" {
  description = "The store's bucket: store.url = s3://<bucket_name>/<store_prefix>."
  value       = module.bucket.name
}

output "store_url" {
  description = "store.url for trawl.toml."
  value       = "s3://${module.bucket.name}/${var.store_prefix}"
}

output "kafka_bootstrap_brokers" {
  description = "Kafka bootstrap brokers (TLS listener for MSK): bus.url = kafka://<this>?tls=true, and the KEDA triggers' bootstrapServers."
  value       = module.kafka.bootstrap_brokers
}

output "stage_role_arns" {
  description = "IAM role ARN per stage (fetcher, chunk-worker, embed-worker, compactor, query), for the service accounts' eks.amazonaws.com/role-arn annotations."
  value       = module.iam.role_arns
}

output "node_group_name" {
  description = "The EKS node group, when create_node_group is true (else null)."
  value       = module.nodes.name
}
