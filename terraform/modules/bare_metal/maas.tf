# MAAS mode: allocate one machine per host (by pool, zone and tags) and deploy the chosen system.

locals {
  maas_hosts = var.provisioner == "maas" ? local.hosts_by_name : {}

  maas_distro_series = {
    "ubuntu-24.04" = "noble"
    "debian-13"    = var.maas_debian_image
  }[var.operating_system]

  ipv4_pattern = "^[0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+$"

  # The machine's first IPv4 address in sorted order (MAAS also reports IPv6 ones).
  maas_addresses = {
    for name, m in maas_instance.node :
    name => try([for ip in sort(tolist(m.ip_addresses)) : ip if can(regex(local.ipv4_pattern, ip))][0], null)
  }
}

resource "maas_instance" "node" {
  for_each = local.maas_hosts

  allocate_params {
    pool = each.value.pool != null ? each.value.pool : var.maas_pool
    zone = each.value.zone != null ? each.value.zone : var.maas_zone
    tags = length(concat(var.maas_tags, each.value.tags)) > 0 ? sort(distinct(concat(var.maas_tags, each.value.tags))) : null
  }

  deploy_params {
    distro_series = local.maas_distro_series
  }

  lifecycle {
    postcondition {
      condition     = anytrue([for ip in self.ip_addresses : can(regex(local.ipv4_pattern, ip))])
      error_message = "MAAS deployed ${self.hostname} for host ${each.key} without an IPv4 address: the inventory needs one."
    }
  }
}
