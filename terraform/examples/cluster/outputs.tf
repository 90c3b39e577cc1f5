output "inventory" {
  description = "The cluster's hosts for peer/deploy/inventory.py (see modules/bare_metal/outputs.tf)."
  value       = module.cluster.inventory
}
