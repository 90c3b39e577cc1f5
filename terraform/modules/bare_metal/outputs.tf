output "inventory" {
  description = "The cluster for peer/deploy/inventory.py: hosts sorted by name, each with name, address (IPv4), groups (its roles, sorted) and vars (zookeeper_id for ZooKeeper members, 1..n in name order)."
  value = {
    hosts = local.inventory_hosts
  }
}
