"""packd: plan and apply the batching of variable-length sequences.

Submodules load lazily so that ``import packd`` stays cheap and never pulls
in the gRPC stubs, ctypes libraries or the GPU binding (packd.gpu) until they
are used.
"""
