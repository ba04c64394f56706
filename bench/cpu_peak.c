/* This machine's peak multiply-add rates, per core and on every core at once: float32 FMA on
 * 512- and 256-bit vectors, and AVX512-BF16 dot products (vdpbf16ps). The ceiling for
 * bench/fast_cpu.py's attention rates (and any GEMM); machines differ between sessions.
 *
 *     cc -O2 -march=native -fopenmp bench/cpu_peak.c -o /tmp/cpu_peak && /tmp/cpu_peak
 *
 * Each loop keeps 12 independent accumulators (unrolled, so they stay in registers), enough to
 * cover the FMA latency. */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>

#define STEPS 100000000L

static double zmm_fma(void) {
    __m512 a[12], x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.9999999f);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    double t = omp_get_wtime();
    for (long s = 0; s < STEPS; s++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], x, y);
    t = omp_get_wtime() - t;
    float sink = 0;
    for (int i = 0; i < 12; i++) sink += _mm512_reduce_add_ps(a[i]);
    return STEPS * 12.0 * 32 / t / 1e9 + (sink == 1.234f);
}

static double ymm_fma(void) {
    __m256 a[12], x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(0.9999999f);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float)i);
    double t = omp_get_wtime();
    for (long s = 0; s < STEPS; s++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], x, y);
    t = omp_get_wtime() - t;
    float out[8], sink = 0;
    for (int i = 0; i < 12; i++) {
        _mm256_storeu_ps(out, a[i]);
        sink += out[0];
    }
    return STEPS * 12.0 * 16 / t / 1e9 + (sink == 1.234f);
}

#ifdef __AVX512BF16__
static double zmm_dpbf16(void) {
    __m512 a[12];
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    double t = omp_get_wtime();
    for (long s = 0; s < STEPS; s++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm512_dpbf16_ps(a[i], x, x);
    t = omp_get_wtime() - t;
    float sink = 0;
    for (int i = 0; i < 12; i++) sink += _mm512_reduce_add_ps(a[i]);
    return STEPS * 12.0 * 64 / t / 1e9 + (sink == 1.234f);
}
#endif

static void report(const char *name, double (*f)(void)) {
    double one = f(), all = 0;
#pragma omp parallel reduction(+ : all)
    all += f();
    printf("%-26s %7.1f GFLOP/s one core, %7.1f on %d cores\n", name, one, all,
           omp_get_max_threads());
}

int main(void) {
    report("float32 FMA, 512-bit", zmm_fma);
    report("float32 FMA, 256-bit", ymm_fma);
#ifdef __AVX512BF16__
    report("bf16 dot products, 512-bit", zmm_dpbf16);
#endif
    return 0;
}
