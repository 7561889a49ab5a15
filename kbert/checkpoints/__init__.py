"""Everything about model files on disk: kbert's directory formats and checkpoint conversion.

The pre-trained directory (`bert_config.json`, `vocab.txt`, `tokenizer_config.json`,
`encoder.weights.h5`) is what `kbert-pretrain` and `kbert-convert` write and every
`--init_checkpoint` reads; the fine-tuned directory adds `task_model.keras` and
`task_config.json`. `open_model_dir(path)` opens either kind, checked once; fine-tuning,
distillation, export and the index open directories through it. Conversion readers
return a `ConvertedModel`; writers take one:

    load_bert_tf1(checkpoint, ...)    ->  ConvertedModel.save_pretrained(dir)
    load_electra_tf1(checkpoint, ...) ->  save_bert_tf1(converted, dir)
    load_huggingface(hf_dir)          ->  save_electra_tf1(converted, dir)
    load_keras_hub(preset)            ->  save_keras_hub_preset(converted, dir)
    load_kbert(dir)                   ->  save_huggingface(converted, dir)

`load_huggingface` and `save_huggingface` pick the architecture's converter by its
record (`kbert.models.registry.ARCHITECTURES`; `kbert.checkpoints.huggingface.CONVERTERS`).

`kbert-convert` is the command-line front end (see docs/convert.md).

Example:

>>> encoder = kbert.checkpoints.load_encoder("out/base")
>>> classifier = kbert.models.BertClassifier(encoder, num_classes=2)
"""

from kbert.checkpoints.bert_tf1 import load_bert_tf1
from kbert.checkpoints.bert_tf1 import save_bert_tf1
from kbert.checkpoints.config_files import read_bert_config
from kbert.checkpoints.config_files import read_encoder_config
from kbert.checkpoints.config_files import read_hf_config
from kbert.checkpoints.config_files import write_bert_config
from kbert.checkpoints.config_files import write_encoder_config
from kbert.checkpoints.converted_model import ConvertedModel
from kbert.checkpoints.converted_model import load_kbert
from kbert.checkpoints.electra_tf1 import load_electra_tf1
from kbert.checkpoints.electra_tf1 import save_electra_tf1
from kbert.checkpoints.finetuned import TaskConfig
from kbert.checkpoints.finetuned import load_finetuned
from kbert.checkpoints.finetuned import read_task_config
from kbert.checkpoints.finetuned import save_finetuned
from kbert.checkpoints.huggingface import load_huggingface
from kbert.checkpoints.huggingface import save_huggingface
from kbert.checkpoints.huggingface_bert import hf_to_tf1_name
from kbert.checkpoints.keras_hub_interop import from_keras_hub
from kbert.checkpoints.keras_hub_interop import load_keras_hub
from kbert.checkpoints.keras_hub_interop import save_keras_hub_preset
from kbert.checkpoints.keras_hub_interop import to_keras_hub
from kbert.checkpoints.minilm import minilm_hf_dir
from kbert.checkpoints.model_dir import FinetunedDir
from kbert.checkpoints.model_dir import ModelDir
from kbert.checkpoints.model_dir import PretrainedDir
from kbert.checkpoints.model_dir import open_model_dir
from kbert.checkpoints.pretrained import load_encoder
from kbert.checkpoints.pretrained import load_pretrainer
from kbert.checkpoints.pretrained import read_sentence_config
from kbert.checkpoints.pretrained import load_pretrainer_weights
from kbert.checkpoints.pretrained import read_tokenizer_config
from kbert.checkpoints.pretrained import save_pretrained
from kbert.checkpoints.sentence_transformers import read_sentence_transformers_config
from kbert.checkpoints.vocabulary_extension import VocabularyExtension
from kbert.checkpoints.vocabulary_extension import check_extendable
from kbert.checkpoints.vocabulary_extension import extend_vocabulary
from kbert.checkpoints.vocabulary_extension import read_words_file
from kbert.checkpoints.weight_map import weight_names
