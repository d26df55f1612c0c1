output "role_arns" {
  description = "Role ARN per stage."
  value       = { for stage, role in aws_iam_role.stage : stage => role.arn }
}
