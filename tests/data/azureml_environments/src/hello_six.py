import sys

import six

print("six", six.__version__, "from", sys.prefix)
