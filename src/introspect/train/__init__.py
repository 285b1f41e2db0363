"""Train a model to report injected thoughts (the instrument's positive control).

``data`` builds the examples from the toolkit's own prompts and concept vectors, ``loop`` trains a
LoRA adapter on the blocks after the injection with the injection hooks active, ``lora`` saves it
as a plain peft adapter, which ``engine.load.adapters`` merges into a model before the bridge
boots (``load_model(name, adapter=DIR)``); ``split`` chooses the held-out concepts by meaning
(concept-vector cosine at the trained layer, plus word-form, compound and synonym rules);
``trunk`` runs the blocks below the adapter once for a replay row's teacher and student;
``losses`` reads the training log by row kind, framing and stretch of training; ``gates`` measures
the damage an adapter does, beside random twins of its size and ``yardsticks`` (the base model in
bf16 or re-quantized, which its users call the same model); ``recipe(name,
layer)`` is a measured flag set by name (``RECIPES``: seed, two-turn).
``selfknow`` (with ``selfknow_data``) trains the Delegate Game's positive control: a LoRA that
replies T on the items its base model gets wrong, beside a control trained on shuffled errors.
"""

from introspect.engine.load.adapters import AdapterError, merge_into, read_adapter
from introspect.engine.load.models import adapted_info
from introspect.train.config import RECIPES, recipe
from introspect.train.data import Example, load_train_words, split_concepts
from introspect.train.loop import TrainConfig, train
from introspect.train.split import MAX_COS, Split, SplitError, meaning_split, near_by_rule

__all__ = ["MAX_COS", "RECIPES", "AdapterError", "Example", "Split", "SplitError", "TrainConfig", "adapted_info",
           "load_train_words", "meaning_split", "merge_into", "near_by_rule", "read_adapter", "recipe", "split_concepts",
           "train"]
