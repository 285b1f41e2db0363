"""Train a model to report injected thoughts (the instrument's positive control).

``data`` builds the examples from the toolkit's own prompts and concept vectors, ``loop`` trains a
LoRA adapter on the blocks after the injection with the injection hooks active, ``lora`` saves it
as a plain peft adapter, which ``engine.load.adapters`` merges into a model before the bridge
boots (``load_model(name, adapter=DIR)``).
"""

from introspect.engine.load.adapters import AdapterError, merge_into, read_adapter
from introspect.engine.load.models import adapted_info
from introspect.train.data import Example, load_train_words, split_concepts
from introspect.train.loop import TrainConfig, train

__all__ = ["AdapterError", "Example", "TrainConfig", "adapted_info", "load_train_words", "merge_into",
           "read_adapter", "split_concepts", "train"]
