# The inventory: one entry per host, sorted by name, whatever the provisioner. peer/deploy/inventory.py
# turns the `inventory` output into the Ansible YAML inventory (deploy/inventories/).

locals {
  hosts_by_name = { for h in var.hosts : h.name => h }

  # maas.tf fills local.maas_addresses in MAAS mode; static hosts bring their own.
  addresses = merge(
    { for h in var.hosts : h.name => h.address if var.provisioner == "static" },
    local.maas_addresses,
  )

  # myid 1..n in sorted name order: stable across applies and independent of var.hosts' order.
  zookeeper_names = sort([for h in var.hosts : h.name if contains(h.roles, "zookeeper")])

  inventory_hosts = [
    for name in sort(keys(local.hosts_by_name)) : {
      name    = name
      address = local.addresses[name]
      groups  = sort(distinct(local.hosts_by_name[name].roles))
      vars    = { for i, zk in local.zookeeper_names : "zookeeper_id" => i + 1 if zk == name }
    }
  ]
}
