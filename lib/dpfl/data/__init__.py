"""The papers' datasets, their federated partitions, and stacked per-client batches."""
from dpfl.data import partition
from dpfl.data.datasets import DATASETS, Dataset, DatasetMissing, load_dataset
from dpfl.data.federated import FederatedDataset
from dpfl.data.figures import plot_label_proportions

__all__ = ["DATASETS", "Dataset", "DatasetMissing", "FederatedDataset", "load_dataset", "partition",
           "plot_label_proportions"]
