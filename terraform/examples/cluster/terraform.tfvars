# The example cluster: three nodes running the ZooKeeper ensemble, peers, Spark and the object
# store (SeaweedFS on the peer nodes, so that each member writes through its own host's S3 gateway),
# and one monitoring host (Prometheus, the Alertmanager it sends its alerts to, and Grafana).
# Addresses are from 192.0.2.0/24 (RFC 5737, documentation only).
provisioner = "static"

hosts = [
  {
    name    = "node-1"
    address = "192.0.2.11"
    roles   = ["zookeeper", "peers", "seaweedfs", "spark_master"]
  },
  {
    name    = "node-2"
    address = "192.0.2.12"
    roles   = ["zookeeper", "peers", "seaweedfs", "spark_workers"]
  },
  {
    name    = "node-3"
    address = "192.0.2.13"
    roles   = ["zookeeper", "peers", "seaweedfs", "spark_workers"]
  },
  {
    name    = "monitor-1"
    address = "192.0.2.21"
    roles   = ["prometheus", "alertmanager", "grafana"]
  },
]
