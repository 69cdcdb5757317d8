"""The GEMM layer: C = A @ B^T (matmul.py)."""
