output "bootstrap_brokers" {
  description = "TLS bootstrap brokers of the created cluster, or the existing ones."
  value       = var.create ? aws_msk_cluster.bus[0].bootstrap_brokers_tls : var.existing_bootstrap_brokers
}
