# One IAM role per stage, assumable only by that stage's Kubernetes service account (IAM roles
# for service accounts), each allowed only the store prefixes the stage touches
# (README "What is stored"):
#
# | stage        | reads                                                   | writes                         | deletes |
# |--------------|---------------------------------------------------------|--------------------------------|---------|
# | fetcher      | repos/, manifests/, runs/, bus/                         | repos/, manifests/, runs/, bus/ | —       |
# | chunk-worker | bus/large/                                              | chunks/, bus/large/            | —       |
# | embed-worker | chunks/, embeddings/, bus/large/                        | embeddings/, runs/, bus/large/ | —       |
# | compactor    | repos/, manifests/, chunks/, embeddings/, runs/, index/ | index/, runs/                  | index/  |
# | query        | index/                                                  | —                              | —       |

locals {
  prefix = trimsuffix(var.store_prefix, "/") == "" ? "" : "${trimsuffix(var.store_prefix, "/")}/"
  stages = {
    "fetcher" = {
      read   = ["repos/", "manifests/", "runs/", "bus/"]
      write  = ["repos/", "manifests/", "runs/", "bus/"]
      delete = []
    }
    "chunk-worker" = {
      read   = ["bus/large/"]
      write  = ["chunks/", "bus/large/"]
      delete = []
    }
    "embed-worker" = {
      read   = ["chunks/", "embeddings/", "bus/large/"]
      write  = ["embeddings/", "runs/", "bus/large/"]
      delete = []
    }
    "compactor" = {
      read   = ["repos/", "manifests/", "chunks/", "embeddings/", "runs/", "index/"]
      write  = ["index/", "runs/"]
      delete = ["index/"]
    }
    "query" = {
      read   = ["index/"]
      write  = []
      delete = []
    }
  }
}

data "aws_iam_policy_document" "assume" {
  for_each = local.stages
  statement {
    actions = ["sts:AssumeRoleWithWebIdentity"]
    principals {
      type        = "Federated"
      identifiers = [var.oidc_provider_arn]
    }
    condition {
      test     = "StringEquals"
      variable = "${var.oidc_issuer}:sub"
      values   = ["system:serviceaccount:${var.namespace}:trawl-${each.key}"]
    }
    condition {
      test     = "StringEquals"
      variable = "${var.oidc_issuer}:aud"
      values   = ["sts.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "store" {
  for_each = local.stages

  statement {
    sid       = "List"
    actions   = ["s3:ListBucket"]
    resources = [var.bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = [for p in each.value.read : "${local.prefix}${p}*"]
    }
  }

  statement {
    sid       = "Read"
    actions   = ["s3:GetObject"]
    resources = [for p in each.value.read : "${var.bucket_arn}/${local.prefix}${p}*"]
  }

  dynamic "statement" {
    for_each = length(each.value.write) > 0 ? [1] : []
    content {
      sid       = "Write"
      actions   = ["s3:PutObject", "s3:AbortMultipartUpload"]
      resources = [for p in each.value.write : "${var.bucket_arn}/${local.prefix}${p}*"]
    }
  }

  dynamic "statement" {
    for_each = length(each.value.delete) > 0 ? [1] : []
    content {
      sid       = "Delete"
      actions   = ["s3:DeleteObject"]
      resources = [for p in each.value.delete : "${var.bucket_arn}/${local.prefix}${p}*"]
    }
  }

  dynamic "statement" {
    for_each = var.kms_key_arn == null ? [] : [1]
    content {
      sid       = "Key"
      actions   = length(each.value.write) > 0 ? ["kms:Decrypt", "kms:GenerateDataKey"] : ["kms:Decrypt"]
      resources = [var.kms_key_arn]
    }
  }
}

resource "aws_iam_role" "stage" {
  for_each           = local.stages
  name               = "${var.name}-${each.key}"
  assume_role_policy = data.aws_iam_policy_document.assume[each.key].json
  tags               = var.tags
}

resource "aws_iam_role_policy" "store" {
  for_each = local.stages
  name     = "trawl-store"
  role     = aws_iam_role.stage[each.key].id
  policy   = data.aws_iam_policy_document.store[each.key].json
}
