"""What a node's agent and the control plane both need to run user code on a host (issue 26): the
sandbox (``sandbox.py``), environments built and cached by hash (``envs.py``), paths opened
without following a user's links (``safe_paths.py``) and size-limited disks (``disks.py``).

The agent runs replicas, jobs and instances with them on its node; the control plane runs
``--local`` replicas with them on the server's host (``control/replica_process.py``) and plans an
instance's disk (``services/compute/instances.py``). Neither imports the other: this package imports
nothing of cloudlet but itself, and ``providers/ssh_hosts.agent_bundle`` ships it with the agent.
"""
