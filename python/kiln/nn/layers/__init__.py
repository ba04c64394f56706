"""Every layer class and activation function of ``kiln.nn``."""

from kiln.nn.layers.activations import (  # noqa: F401
    CELU,
    ELU,
    GELU,
    GLU,
    SELU,
    HardShrink,
    Hardswish,
    HardTanh,
    LeakyReLU,
    LogSigmoid,
    LogSoftmax,
    Mish,
    PReLU,
    ReLU,
    ReLU2,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softmin,
    Softplus,
    Softshrink,
    Softsign,
    Step,
    Tanh,
    celu,
    elu,
    gelu,
    gelu_approx,
    gelu_fast_approx,
    glu,
    hard_shrink,
    hard_tanh,
    hardswish,
    leaky_relu,
    log_sigmoid,
    log_softmax,
    mish,
    prelu,
    relu,
    relu2,
    relu6,
    selu,
    sigmoid,
    silu,
    softmax,
    softmin,
    softplus,
    softshrink,
    softsign,
    step,
    tanh,
)
from kiln.nn.layers.base import Module  # noqa: F401
from kiln.nn.layers.containers import Sequential  # noqa: F401
from kiln.nn.layers.convolution import Conv1d, Conv2d, Conv3d  # noqa: F401
from kiln.nn.layers.convolution_transpose import (  # noqa: F401
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
)
from kiln.nn.layers.distributed import (  # noqa: F401
    AllToShardedLinear,
    FullyShardedModule,
    QuantizedAllToShardedLinear,
    QuantizedShardedToAllLinear,
    ShardedToAllLinear,
    fully_shard,
)
from kiln.nn.layers.dropout import Dropout, Dropout2d, Dropout3d  # noqa: F401
from kiln.nn.layers.embedding import Embedding  # noqa: F401
from kiln.nn.layers.linear import Bilinear, Identity, Linear  # noqa: F401
from kiln.nn.layers.normalization import (  # noqa: F401
    BatchNorm,
    GroupNorm,
    InstanceNorm,
    LayerNorm,
    RMSNorm,
)
from kiln.nn.layers.pooling import (  # noqa: F401
    AvgPool1d,
    AvgPool2d,
    AvgPool3d,
    MaxPool1d,
    MaxPool2d,
    MaxPool3d,
)
from kiln.nn.layers.positional_encoding import (  # noqa: F401
    ALiBi,
    RoPE,
    SinusoidalPositionalEncoding,
)
from kiln.nn.layers.quantized import QQLinear, QuantizedEmbedding, QuantizedLinear, quantize  # noqa: F401
from kiln.nn.layers.recurrent import GRU, LSTM, RNN  # noqa: F401
from kiln.nn.layers.transformer import (  # noqa: F401
    MultiHeadAttention,
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from kiln.nn.layers.upsample import Upsample  # noqa: F401
