"""Every asset is a pandas DataFrame stored as Parquet under one configurable base path.

Built on Dagster's UPathIOManager, so the base path may be a local folder or any fsspec URL
(s3://, gs://, memory://) without changing an asset.
"""

from __future__ import annotations

import os

import dagster as dg
import pandas as pd
from upath import UPath

DEFAULT_ASSETS_DIR = "data/assets"


class ParquetUPathIOManager(dg.UPathIOManager):
    extension = ".parquet"

    def dump_to_path(self, context: dg.OutputContext, obj: pd.DataFrame, path: UPath) -> None:
        if not isinstance(obj, pd.DataFrame):
            raise TypeError(f"{context.asset_key.to_user_string()} must be a DataFrame, "
                            f"got {type(obj).__name__}")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as fh:
            obj.to_parquet(fh, index=False)

    def load_from_path(self, context: dg.InputContext, path: UPath) -> pd.DataFrame:
        with path.open("rb") as fh:
            return pd.read_parquet(fh)

    def get_metadata(self, context: dg.OutputContext, obj: pd.DataFrame
                     ) -> dict[str, dg.MetadataValue]:
        return {
            "dagster/row_count": dg.MetadataValue.int(len(obj)),
            "dagster/column_schema": dg.TableSchema(
                columns=[dg.TableColumn(str(c), str(t)) for c, t in obj.dtypes.items()]
            ),
        }


class ParquetIOManager(dg.ConfigurableIOManagerFactory):
    """Parquet files at ``<base_path>/<asset key path>/<partition>.parquet``."""

    base_path: str = DEFAULT_ASSETS_DIR

    def create_io_manager(self, context: dg.InitResourceContext) -> ParquetUPathIOManager:
        return ParquetUPathIOManager(base_path=UPath(os.path.expanduser(self.base_path)))


def as_partition_dict(loaded: pd.DataFrame | dict[str, pd.DataFrame] | None,
                      only_key: str | None = None) -> dict[str, pd.DataFrame]:
    """An unpartitioned reader gets a bare DataFrame when exactly one partition exists."""
    if loaded is None:
        return {}
    if isinstance(loaded, pd.DataFrame):
        return {only_key or "_single": loaded}
    return dict(loaded)
