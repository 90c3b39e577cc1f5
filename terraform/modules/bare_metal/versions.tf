terraform {
  # 1.9 is the first release whose variable validations may refer to other variables
  # (the hosts' validations read var.provisioner).
  required_version = "~> 1.9"

  required_providers {
    maas = {
      source  = "canonical/maas"
      version = "~> 2.4"
    }
  }
}
