variable "provisioner" {
  type        = string
  description = "Where the machines come from: \"maas\" allocates and deploys them with MAAS; \"static\" takes hosts already racked and installed, at the addresses given in var.hosts."

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
  description = <<-EOT
    The cluster's machines. name: the Ansible inventory name (also the sort key that assigns
    zookeeper_id). roles: the inventory groups the host belongs to, from zookeeper, peers,
    spark_master, spark_workers, seaweedfs (the object store), prometheus, alertmanager (any
    number of hosts: several gossip and notify once), grafana. address: the host's IPv4 address,
    required with provisioner "static" and not allowed with "maas" (MAAS assigns it). pool, zone,
    tags: MAAS allocation constraints for this machine, added to maas_pool, maas_zone and
    maas_tags.
  EOT

  validation {
    condition     = alltrue([for h in var.hosts : can(regex("^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", h.name))])
    error_message = "Every host name must be a DNS label: lower-case letters, digits and inner hyphens, at most 63 characters."
  }

  validation {
    condition     = length(distinct([for h in var.hosts : h.name])) == length(var.hosts)
    error_message = "Host names must be unique."
  }

  validation {
    condition     = alltrue([for h in var.hosts : length(h.roles) > 0])
    error_message = "Every host needs at least one role."
  }

  validation {
    condition = alltrue([
      for h in var.hosts : length(setsubtract(h.roles, [
        "zookeeper", "peers", "spark_master", "spark_workers", "seaweedfs", "prometheus",
        "alertmanager", "grafana",
      ])) == 0
    ])
    error_message = "Roles must be among zookeeper, peers, spark_master, spark_workers, seaweedfs, prometheus, alertmanager, grafana."
  }

  validation {
    condition     = contains([1, 3, 5], length([for h in var.hosts : h.name if contains(h.roles, "zookeeper")]))
    error_message = "The zookeeper role needs an odd number of hosts: 1, 3 or 5 (a majority must survive a failure)."
  }

  validation {
    condition     = contains([0, 1, 3, 5], length([for h in var.hosts : h.name if contains(h.roles, "seaweedfs")]))
    error_message = "The seaweedfs role (the object store) needs no host or an odd number: 1, 3 or 5 (each runs a master, and the masters' Raft needs a majority)."
  }

  validation {
    condition     = length([for h in var.hosts : h.name if contains(h.roles, "spark_master")]) == 1
    error_message = "Exactly one host must have the spark_master role."
  }

  validation {
    condition     = length([for h in var.hosts : h.name if contains(h.roles, "spark_workers")]) >= 1
    error_message = "At least one host must have the spark_workers role."
  }

  validation {
    condition     = length([for h in var.hosts : h.name if contains(h.roles, "peers")]) >= 1
    error_message = "At least one host must have the peers role."
  }

  validation {
    condition = alltrue([
      for h in var.hosts : h.address == null || can(regex(
        "^((25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])$",
        h.address,
      ))
    ])
    error_message = "Every host address must be a dotted-quad IPv4 address such as 192.0.2.10."
  }

  validation {
    condition     = var.provisioner != "static" || alltrue([for h in var.hosts : h.address != null])
    error_message = "With provisioner \"static\" every host needs an address."
  }

  validation {
    condition     = var.provisioner != "maas" || alltrue([for h in var.hosts : h.address == null])
    error_message = "With provisioner \"maas\" hosts take no address: MAAS assigns it."
  }

  validation {
    condition = (
      length(distinct(compact([for h in var.hosts : h.address]))) ==
      length(compact([for h in var.hosts : h.address]))
    )
    error_message = "Host addresses must be unique."
  }
}

variable "operating_system" {
  type        = string
  description = "The system MAAS deploys (provisioner \"maas\" only; static hosts must already run one of these): \"ubuntu-24.04\" or \"debian-13\"."
  default     = "ubuntu-24.04"

  validation {
    condition     = contains(["ubuntu-24.04", "debian-13"], var.operating_system)
    error_message = "operating_system must be \"ubuntu-24.04\" or \"debian-13\": the only systems the Ansible roles support."
  }
}

variable "maas_debian_image" {
  type        = string
  description = "The distro_series MAAS deploys for operating_system \"debian-13\": MAAS ships no Debian image, so this names a custom image uploaded beforehand (e.g. built with packer-maas)."
  default     = "custom/debian-13"

  validation {
    condition     = length(trimspace(var.maas_debian_image)) > 0
    error_message = "maas_debian_image must name the uploaded Debian 13 image."
  }
}

variable "maas_pool" {
  type        = string
  description = "The MAAS resource pool every machine is allocated from, unless a host names its own pool; null allows any pool."
  default     = null
}

variable "maas_zone" {
  type        = string
  description = "The MAAS availability zone every machine is allocated in, unless a host names its own zone; null allows any zone."
  default     = null
}

variable "maas_tags" {
  type        = list(string)
  description = "MAAS tags every allocated machine must carry, in addition to each host's own tags."
  default     = []

  validation {
    condition     = alltrue([for t in var.maas_tags : length(trimspace(t)) > 0])
    error_message = "maas_tags must not contain empty tags."
  }
}
