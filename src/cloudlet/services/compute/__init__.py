"""Computes and what they run on: clusters, instances and attached VMs, their nodes and the agents'
protocol, locations, the size catalogue (and the sizes a new compute may take), quotas, management locks,
long-running operations, preemption, and a compute's managed identity."""
