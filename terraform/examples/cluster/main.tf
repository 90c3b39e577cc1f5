# An onyx cluster on bare metal. With provisioner = "static" (terraform.tfvars) nothing is created:
# the module only checks the hosts and emits the inventory. With "maas" it allocates and deploys them.
#
#   terraform init && terraform apply
#   terraform output -json > terraform-output.json
#   python -m peer.deploy.inventory terraform-output.json > ../../../deploy/inventories/cluster/hosts.yml

provider "maas" {
  # Static mode creates no MAAS resource, but Terraform still configures the provider, which refuses
  # an empty key or URL: give it a well-formed placeholder that is never used to call MAAS.
  api_url = var.provisioner == "maas" ? var.maas_api_url : "http://127.0.0.1:5240/MAAS"
  api_key = var.provisioner == "maas" ? var.maas_api_key : "static:provisioner:unused"
}

module "cluster" {
  source = "../../modules/bare_metal"

  provisioner       = var.provisioner
  hosts             = var.hosts
  operating_system  = var.operating_system
  maas_debian_image = var.maas_debian_image
  maas_pool         = var.maas_pool
  maas_zone         = var.maas_zone
  maas_tags         = var.maas_tags
}
