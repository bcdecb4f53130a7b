"""Pure rules of computes and their machines: compute specs and types, the size catalogue, quota
arithmetic, management locks, lifecycle and node state machines, autoscaling, eviction, costs, idle
shutdown and schedules of instances, SSH and attached-VM rules, host placement, and the operations' plans."""
