"""The largest values the API takes: every number that reaches arithmetic (quota, autoscaling,
scheduling) is finite and bounded at the edge, so one absurd document cannot poison a loop that
serves everyone. Generous beyond any real deployment; the message that refuses a value names it."""

MAX_CLUSTER_NODES = 10_000  # max_instances / min_instances / instance_count
MAX_PROCESSES_PER_NODE = 1_024
# One job's processes in all (instance_count × processes per node, or TensorFlow's workers +
# parameter servers): each is a run row and a run spec written in one transaction, and each
# TensorFlow task's TF_CONFIG names every task, so this bounds what one job may write.
MAX_PROCESSES_PER_JOB = 1_024
# Each TensorFlow task's TF_CONFIG names every task, so what such a job writes grows as the
# square of its tasks: 256 tasks write ~1 MB of run specs in all (1,024 would write ~19 MB).
MAX_TENSORFLOW_TASKS = 256
MAX_SERVERLESS_INSTANCES = 100  # a serverless job's nodes (made for it alone)
MAX_IDLE_SECONDS = 30 * 24 * 3600  # idle_time_before_scale_down: 30 days
MAX_JOB_TIMEOUT_S = 90 * 24 * 3600  # limits.timeout: 90 days
MAX_SIZE_VCPUS = 1_024
MAX_SIZE_MEMORY_GB = 65_536
MAX_SIZE_GPUS = 64
MAX_QUOTA_CORES = 10_000_000
MAX_LOCATION_VCPUS = 10_000_000
MAX_LOCATION_MEMORY_GB = 1_000_000_000
MAX_LOCATION_GPUS = 1_000_000
MAX_OVERCOMMIT = 100
MAX_ATTEMPT = 1_000_000
MAX_OFFSET = 2**53  # a byte offset into a log (JavaScript-safe)
MAX_TEXT = 4_096  # descriptions, notes
MAX_TAGS = 64
