variable "provisioner" {
  type        = string
  description = "\"maas\" to allocate and deploy the machines with MAAS, \"static\" for hosts already racked at the addresses in var.hosts."
  default     = "static"

  validation {
    condition     = contains(["maas", "static"], var.provisioner)
    error_message = "provisioner must be \"maas\" or \"static\"."
  }
}

variable "hosts" {
  type = list(object({
    name    = string
    roles   = list(string)
    address = optional(string)
    pool    = optional(string)
    zone    = optional(string)
    tags    = optional(list(string), [])
  }))
  description = "The cluster's machines: name, roles (zookeeper, peers, spark_master, spark_workers, seaweedfs, prometheus, alertmanager, grafana), and address (static) or MAAS pool, zone and tags (maas). The bare_metal module validates them."
}

variable "operating_system" {
  type        = string
  description = "The system MAAS deploys: \"ubuntu-24.04\" or \"debian-13\" (static hosts must already run one of them)."
  default     = "ubuntu-24.04"

  validation {
    condition     = contains(["ubuntu-24.04", "debian-13"], var.operating_system)
    error_message = "operating_system must be \"ubuntu-24.04\" or \"debian-13\"."
  }
}

variable "maas_debian_image" {
  type        = string
  description = "The MAAS custom image deployed for operating_system \"debian-13\" (MAAS ships no Debian image: upload one first)."
  default     = "custom/debian-13"
}

variable "maas_api_url" {
  type        = string
  description = "The MAAS API URL, e.g. http://maas.example.net:5240/MAAS; null reads MAAS_API_URL from the environment."
  default     = null

  validation {
    condition     = var.maas_api_url == null || can(regex("^https?://", var.maas_api_url))
    error_message = "maas_api_url must be an http:// or https:// URL."
  }
}

variable "maas_api_key" {
  type        = string
  description = "The MAAS API key (consumer:token:secret); null reads MAAS_API_KEY from the environment. Pass it as TF_VAR_maas_api_key, never in a committed file."
  default     = null
  sensitive   = true
}

variable "maas_pool" {
  type        = string
  description = "The MAAS resource pool to allocate from; null allows any pool."
  default     = null
}

variable "maas_zone" {
  type        = string
  description = "The MAAS availability zone to allocate in; null allows any zone."
  default     = null
}

variable "maas_tags" {
  type        = list(string)
  description = "MAAS tags every allocated machine must carry."
  default     = []
}
