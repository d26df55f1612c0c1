# An optional managed node group for trawl's pods. Sized for the query service and the
# compactor (6 GiB requests each at 1M chunks) next to the workers.

data "aws_iam_policy_document" "nodes" {
  count = var.create ? 1 : 0
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "nodes" {
  count              = var.create ? 1 : 0
  name               = "${var.name}-nodes"
  assume_role_policy = data.aws_iam_policy_document.nodes[0].json
  tags               = var.tags
}

resource "aws_iam_role_policy_attachment" "nodes" {
  for_each = var.create ? toset([
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
  ]) : toset([])
  role       = aws_iam_role.nodes[0].name
  policy_arn = each.value
}

resource "aws_eks_node_group" "trawl" {
  count           = var.create ? 1 : 0
  cluster_name    = var.cluster_name
  node_group_name = "${var.name}-nodes"
  node_role_arn   = aws_iam_role.nodes[0].arn
  subnet_ids      = var.subnet_ids
  instance_types  = var.instance_types
  tags            = var.tags

  scaling_config {
    min_size     = var.min_size
    max_size     = var.max_size
    desired_size = var.min_size
  }

  labels = {
    "trawl.dev/pool" = "trawl"
  }

  depends_on = [aws_iam_role_policy_attachment.nodes]
}
