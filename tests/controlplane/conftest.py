"""The real node's fixtures (`realnode_support`), for every test of this folder."""

from realnode_support import namespace, real_node, real_node_root  # noqa: F401
