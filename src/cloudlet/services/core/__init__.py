"""What every use case leans on, whatever its resource: the caller's context, the clock, a unit of work's
effects and the wake-ups they cause (in a process and between worker processes), leases, one request's
share of a batched transaction, where the data plane keeps bytes, and the first start's bootstrap."""
