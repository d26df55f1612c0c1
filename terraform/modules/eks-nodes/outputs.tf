output "name" {
  description = "The node group's name, or null."
  value       = var.create ? aws_eks_node_group.trawl[0].node_group_name : null
}
