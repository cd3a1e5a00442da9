# A root module that needs no provider download: it records its inputs in state.
variable "environment" {
  type    = string
  default = "dev"
}

variable "region" {
  type    = string
  default = "us-east-1"
}

variable "release" {
  type    = string
  default = "v1"
}

resource "terraform_data" "release" {
  input = {
    environment = var.environment
    region      = var.region
    release     = var.release
  }
}

output "deployed" {
  value = "${var.release} in ${var.environment}/${var.region}"
}
