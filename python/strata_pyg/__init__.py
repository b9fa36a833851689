"""strata_pyg: PyTorch Geometric loaders whose batches a Strata server
samples (`strata serve`; see docs/pytorch.md).

    from strata_pyg import NeighborLoader
    loader = NeighborLoader(data, num_neighbors=[15, 10, 5], batch_size=1024,
                            input_nodes=data.train_mask, shuffle=True)
"""

from ._rpc import PROTOCOL_VERSION, Connection
from ._server import LocalServer, find_strata
from .dataset import load_dataset
from .errors import StrataError
from .link import LinkNeighborLoader
from .loader import Batch, HeteroBatch, NeighborLoader

__all__ = ["NeighborLoader", "LinkNeighborLoader", "HeteroBatch", "StrataError", "load_dataset", "Batch", "Connection", "LocalServer", "find_strata", "PROTOCOL_VERSION"]
__version__ = "0.1.0"
