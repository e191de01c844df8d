# Types of the C extension eval_pipeline/_jsonlines.c (see its comments).
from typing_extensions import Buffer

class OwnedBuffer(Buffer):
    """Bytes read_batch() wrote, handed to pyarrow without a copy."""

_Column = tuple[int, OwnedBuffer | None, OwnedBuffer | None, OwnedBuffer | int]

def read_batch(data: Buffer, raw: Buffer) -> tuple[int, list[int], list[int], list[int], list[int],
                                      tuple[_Column, ...]] | None: ...
