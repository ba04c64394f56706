/* kiln's erf, shared by preamble.c and preamble.cu (kiln-codegen puts this first in both):
 * x P(x^2) / Q(x^2) on |x| <= K_ERF_CLAMP (erf rounds to +-1 past it), P of degree 5 and Q of
 * degree 6, fitted for kiln for least relative error (fit 2.4e-9; in float32 3.0e-7 absolute,
 * 4 ulp relative near 0). FMA is the including preamble's fused multiply-add. */
#define K_ERF_CLAMP 3.925f
#define K_ERF_P(z, FMA)                                                                     \
    FMA(FMA(FMA(FMA(FMA(6.534055956e-06f, z, 4.043538065e-04f), z, 4.191690590e-03f), z,  \
                    5.555549264e-02f), z, 1.924868971e-01f), z, 1.128379226e+00f)
#define K_ERF_Q(z, FMA)                                                                     \
    FMA(FMA(FMA(FMA(FMA(FMA(2.460240580e-07f, z, 7.071616710e-05f), z, 1.405171934e-03f), \
                        z, 1.620282233e-02f), z, 1.172077879e-01f), z, 5.039204359e-01f), \
        z, 1.000000000e+00f)
