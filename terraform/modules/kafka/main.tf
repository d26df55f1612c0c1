# Kafka for the bus: an MSK cluster (TLS in transit, reachable only from the VPC), or an
# existing cluster's brokers. trawl's topics are created by the fetcher at start (admin API).

resource "aws_security_group" "kafka" {
  count       = var.create ? 1 : 0
  name        = "${var.name}-kafka"
  description = "trawl's MSK brokers: TLS listener from the VPC"
  vpc_id      = var.vpc_id
  tags        = var.tags

  ingress {
    description = "Kafka TLS from the VPC"
    from_port   = 9094
    to_port     = 9094
    protocol    = "tcp"
    cidr_blocks = [var.vpc_cidr]
  }
}

resource "aws_msk_cluster" "bus" {
  count                  = var.create ? 1 : 0
  cluster_name           = var.name
  kafka_version          = var.kafka_version
  number_of_broker_nodes = var.broker_count
  tags                   = var.tags

  broker_node_group_info {
    instance_type   = var.instance_type
    client_subnets  = var.subnet_ids
    security_groups = [aws_security_group.kafka[0].id]
    storage_info {
      ebs_storage_info {
        volume_size = var.volume_gb
      }
    }
  }

  encryption_info {
    encryption_in_transit {
      client_broker = "TLS"
      in_cluster    = true
    }
  }

  # Inside the VPC only (the security group above); trawl connects with TLS.
  client_authentication {
    unauthenticated = true
  }
}
