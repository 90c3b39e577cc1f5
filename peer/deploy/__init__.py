"""Deployment helpers: glue between Terraform's provisioning and Ansible's rollout."""
