"""Layers keras-hub lacks. Everything else comes from `keras_hub.layers`."""

from kbert.layers.activations import ACTIVATION_NAMES
from kbert.layers.activations import get_activation
from kbert.layers.bert_masked_lm_head import BertMaskedLMHead
from kbert.layers.fast_masked_lm_head import FastMaskedLMHead
from kbert.layers.cross_entropy import sparse_softmax_cross_entropy
from kbert.layers.cross_entropy import sparse_softmax_cross_entropy_and_hits
from kbert.layers.crf import LinearChainCrf
from kbert.layers.crf import bio_transitions
from kbert.layers.crf import tag_scheme
from kbert.layers.crf import tag_transitions
from kbert.layers.dropout import Dropout
from kbert.layers.fast_layers import use_fast_layers
from kbert.layers.gelu import gelu_approximate
from kbert.layers.int8_dense import Int8Dense
from kbert.layers.int8_dense import Int8EinsumDense
from kbert.layers.int8_dense import int8_layers
from kbert.layers.int8_dense import quantize_int8
from kbert.layers.layer_mix import EncoderLayerMix
from kbert.layers.layer_mix import layer_indexes
from kbert.layers.layer_normalization import LayerNormalization
from kbert.layers.next_sentence_head import NextSentenceHead
from kbert.layers.sentence_pooling import POOLING_MODES
from kbert.layers.sentence_pooling import SentencePooling
from kbert.layers.similarity_scores import SimilarityScores
from kbert.layers.replaced_token_detection_head import ReplacedTokenDetectionHead
from kbert.layers.replaced_token_sampler import ReplacedTokenSampler
