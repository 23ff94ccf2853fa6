# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Constants of the kubernetes-worker charm: its endpoints (charmcraft.yaml)."""

CLUSTER = "cluster"  # the control plane's join material; this node's name and GPUs back
REBOOTS = "reboots"  # peers: turns to drain and reboot (reboot_turns.py)
COS_AGENT = "cos-agent"  # the machine's COS agent: scrape jobs, rules, dashboards
