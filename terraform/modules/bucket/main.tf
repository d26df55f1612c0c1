# The store's bucket: versioned, encrypted, never public. Old index generations are deleted by
# `trawl compact --gc` (an incremental generation reuses segments older generations wrote, so
# an age rule on index/ would delete live data); versioning keeps what gc deleted as noncurrent
# versions for noncurrent_days — a window to recover a rollback target — then it expires.

resource "aws_s3_bucket" "store" {
  bucket = var.bucket_name
  tags   = var.tags
}

resource "aws_s3_bucket_versioning" "store" {
  bucket = aws_s3_bucket.store.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "store" {
  bucket = aws_s3_bucket.store.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = var.kms_key_arn == null ? "AES256" : "aws:kms"
      kms_master_key_id = var.kms_key_arn
    }
    bucket_key_enabled = var.kms_key_arn != null
  }
}

resource "aws_s3_bucket_public_access_block" "store" {
  bucket                  = aws_s3_bucket.store.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "store" {
  bucket = aws_s3_bucket.store.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "store" {
  bucket     = aws_s3_bucket.store.id
  depends_on = [aws_s3_bucket_versioning.store]

  # Old generations (and anything else deleted or overwritten): expire the noncurrent versions.
  rule {
    id     = "old-generations"
    status = "Enabled"
    filter {}
    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_days
    }
    expiration {
      expired_object_delete_marker = true
    }
  }

  # A multipart upload a crashed compactor left behind.
  rule {
    id     = "abandoned-uploads"
    status = "Enabled"
    filter {}
    abort_incomplete_multipart_upload {
      days_after_initiation = 2
    }
  }
}
