"""A step process that writes its argv and one environment variable as JSON to argv[1]."""

import json
import os
import sys

with open(sys.argv[1], "w") as out:
    json.dump({"argv": sys.argv[2:], "value": os.environ.get("K8S_AI_TEST_VALUE")}, out)
