"""The stream's way into the engine: a poll batch as steps in, one outcome per step out."""

from .apply import apply_batch
from .published import Published
from .quality import mean_loss
from .steps import Applied, Batch, Columns, Forget, Forgotten, Learn, Learned

__all__ = ["Applied", "Batch", "Columns", "Forget", "Forgotten", "Learn", "Learned", "Published",
           "apply_batch", "mean_loss"]
