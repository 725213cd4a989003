/* The memory-bound elementwise steps of back-substitution (CROWN), each in one pass over the rows.
 *
 * Rows are `A` of shape (G, S, N), contiguous: group g's S rows over N neurons. Maps of the neurons
 * (slopes, intercepts, a box's centre and radius) are (G, N), or one (N) shared by every group
 * (map_stride 0); a lower slope may also be given per row ((G, S, N), ls_row_stride N).
 *
 * relaxed: the rows through a relaxation ls x <= f(x) <= us x + ub, for lower bounds: a positive
 *   coefficient takes the lower line, a negative one the upper. out = A+ ls + A- us; bias[g, s] =
 *   sum A- ub. The composed ATen ops take seven passes over A (clamp, subtract, two products, a sum,
 *   and the product and reduction of the bias).
 * bound: the least value of each row over the box centre +- radius: sum A c - |A| r, where ATen takes
 *   an absolute value and two products.
 * relaxed_backward, bound_backward: their gradients (training through CROWN-IBP), one pass over A and
 *   the incoming gradient where autograd takes about ten. The maps' gradients sum over a group's rows,
 *   so each group runs on one thread (the maps must be per group).
 *
 * Sums accumulate in double whatever the type, in vector lanes (`omp simd reduction`): they may differ
 * from the composed ops (pairwise, in the type) in the last bits (tests/runtime/test_native.py compares
 * them within rounding). Loops run on OpenMP threads
 * from PyTorch's pool (see box_kernels.c), a row per iteration.
 */
#include <stdint.h>

#define GRAIN 32768

#define LINEAR_KERNELS(T, SUFFIX)                                                                   \
    void relaxed_##SUFFIX(const T *restrict A, const T *restrict ls, int64_t ls_group,               \
                          int64_t ls_row, const T *restrict us, const T *restrict ub,               \
                          int64_t map_group, T *restrict out, T *restrict bias, int64_t groups,     \
                          int64_t rows, int64_t n, int threads) {                                   \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if (groups * rows * n > GRAIN)") \
        for (int64_t gs = 0; gs < groups * rows; gs++) {                                            \
            int64_t g = gs / rows, s = gs % rows;                                                   \
            const T *restrict a = A + gs * n;                                                       \
            const T *restrict l = ls + g * ls_group + s * ls_row;                                   \
            const T *restrict u = us + g * map_group;                                               \
            const T *restrict b = ub + g * map_group;                                               \
            T *restrict o = out + gs * n;                                                           \
            double total = 0;                                                                       \
            _Pragma("omp simd reduction(+ : total)")                                                \
            for (int64_t i = 0; i < n; i++) {                                                       \
                T ai = a[i];                                                                        \
                T negative = ai < (T)0 ? ai : (T)0;                                                 \
                o[i] = ai > (T)0 ? ai * l[i] : negative * u[i];                                     \
                total += negative * b[i];                                                           \
            }                                                                                       \
            bias[gs] = (T)total;                                                                    \
        }                                                                                           \
    }                                                                                               \
    void bound_##SUFFIX(const T *restrict A, const T *restrict c, const T *restrict r,               \
                        int64_t map_group, T *restrict out, int64_t groups, int64_t rows,           \
                        int64_t n, int threads) {                                                   \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if (groups * rows * n > GRAIN)") \
        for (int64_t gs = 0; gs < groups * rows; gs++) {                                            \
            int64_t g = gs / rows;                                                                  \
            const T *restrict a = A + gs * n;                                                       \
            const T *restrict cg = c + g * map_group;                                               \
            const T *restrict rg = r + g * map_group;                                               \
            double at_centre = 0, spread = 0;                                                       \
            _Pragma("omp simd reduction(+ : at_centre, spread)")                                    \
            for (int64_t i = 0; i < n; i++) {                                                       \
                T ai = a[i];                                                                        \
                at_centre += ai * cg[i];                                                            \
                spread += (ai < (T)0 ? -ai : ai) * rg[i];                                           \
            }                                                                                       \
            out[gs] = (T)(at_centre - spread);                                                      \
        }                                                                                           \
    }

LINEAR_KERNELS(float, f32)
LINEAR_KERNELS(double, f64)

/* grad_A = A > 0 ? g ls : g us + g_bias ub; grad_ls = sum_s [A > 0] A g (per row: no sum);
 * grad_us = sum_s [A <= 0] A g; grad_ub = sum_s min(A, 0) g_bias. */
#define LINEAR_BACKWARD(T, SUFFIX)                                                                  \
    void relaxed_backward_##SUFFIX(const T *restrict A, const T *restrict ls, int64_t ls_row,       \
                                   const T *restrict us, const T *restrict ub,                      \
                                   const T *restrict grad_out, const T *restrict grad_bias,         \
                                   T *restrict grad_A, T *restrict grad_ls, T *restrict grad_us,    \
                                   T *restrict grad_ub, int64_t groups, int64_t rows, int64_t n,    \
                                   int threads) {                                                   \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if (groups * rows * n > GRAIN)") \
        for (int64_t g = 0; g < groups; g++) {                                                      \
            const T *restrict u = us + g * n;                                                       \
            const T *restrict b = ub + g * n;                                                       \
            T *restrict gu = grad_us + g * n;                                                       \
            T *restrict gb = grad_ub + g * n;                                                       \
            int64_t ls_group = ls_row ? rows * n : n;                                               \
            for (int64_t i = 0; i < n; i++) {                                                       \
                gu[i] = (T)0;                                                                       \
                gb[i] = (T)0;                                                                       \
            }                                                                                       \
            if (!ls_row)                                                                            \
                for (int64_t i = 0; i < n; i++) grad_ls[g * n + i] = (T)0;                          \
            for (int64_t s = 0; s < rows; s++) {                                                    \
                int64_t gs = g * rows + s;                                                          \
                const T *restrict a = A + gs * n;                                                   \
                const T *restrict go = grad_out + gs * n;                                           \
                const T *restrict l = ls + g * ls_group + s * ls_row;                               \
                T *restrict gl = grad_ls + g * ls_group + s * ls_row;                               \
                T *restrict ga = grad_A + gs * n;                                                   \
                T gbias = grad_bias[gs];                                                            \
                if (ls_row) {                                                                       \
                    _Pragma("omp simd")                                                             \
                    for (int64_t i = 0; i < n; i++) {                                               \
                        T ai = a[i], gi = go[i];                                                    \
                        T positive = ai > (T)0 ? ai : (T)0;                                         \
                        T negative = ai - positive;                                                 \
                        ga[i] = ai > (T)0 ? gi * l[i] : gi * u[i] + gbias * b[i];                   \
                        gl[i] = positive * gi;                                                      \
                        gu[i] += negative * gi;                                                     \
                        gb[i] += negative * gbias;                                                  \
                    }                                                                               \
                } else {                                                                            \
                    _Pragma("omp simd")                                                             \
                    for (int64_t i = 0; i < n; i++) {                                               \
                        T ai = a[i], gi = go[i];                                                    \
                        T positive = ai > (T)0 ? ai : (T)0;                                         \
                        T negative = ai - positive;                                                 \
                        ga[i] = ai > (T)0 ? gi * l[i] : gi * u[i] + gbias * b[i];                   \
                        gl[i] += positive * gi;                                                     \
                        gu[i] += negative * gi;                                                     \
                        gb[i] += negative * gbias;                                                  \
                    }                                                                               \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
    }                                                                                               \
    /* grad_A = g (c - sign(A) r), the gradient of sum A c - |A| r in A */                          \
    void bound_backward_##SUFFIX(const T *restrict A, const T *restrict c, const T *restrict r,      \
                                 int64_t map_group, const T *restrict grad, T *restrict grad_A,     \
                                 int64_t groups, int64_t rows, int64_t n, int threads) {            \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if (groups * rows * n > GRAIN)") \
        for (int64_t gs = 0; gs < groups * rows; gs++) {                                            \
            int64_t g = gs / rows;                                                                  \
            const T *restrict a = A + gs * n;                                                       \
            const T *restrict cg = c + g * map_group;                                               \
            const T *restrict rg = r + g * map_group;                                               \
            T *restrict ga = grad_A + gs * n;                                                       \
            T gi = grad[gs];                                                                        \
            for (int64_t i = 0; i < n; i++) {                                                       \
                T ai = a[i];                                                                        \
                T signed_r = ai > (T)0 ? rg[i] : (ai < (T)0 ? -rg[i] : (T)0);                       \
                ga[i] = gi * (cg[i] - signed_r);                                                    \
            }                                                                                       \
        }                                                                                           \
    }

LINEAR_BACKWARD(float, f32)
LINEAR_BACKWARD(double, f64)

/* The same two steps on rows kept as windows of a (C, H, W) map (coeffs.Patches): row r is P[r] of shape
 * (C, Kh, Kw), over image image[r]'s map, its window's corner at map row i * sh - ph and column
 * j * sw - pw, where (i, j) is position[r] on a grid ws wide. The maps are read in place, (B or 1, C, H, W)
 * contiguous (map_image H * W * C, or 0 when shared), where the composed ops first copy each row's window
 * out of them (an index_select as large as P per map). Outside the map the maps count as zero, as the
 * windows' coefficients there are. */
typedef struct {
    int64_t R, C, Kh, Kw, H, W, ws, sh, sw, ph, pw;
} Windows;

typedef struct {
    int64_t top, left, first, end; /* the window's corner in the map; its columns inside: [first, end) */
} Window;

static inline Windows windows_of(const int64_t *s) {
    Windows w = {s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10]};
    return w;
}

static inline Window window_at(const Windows *w, int64_t position) {
    Window at;
    at.top = (position / w->ws) * w->sh - w->ph;
    at.left = (position % w->ws) * w->sw - w->pw;
    at.first = at.left < 0 ? -at.left : 0;
    at.end = w->W - at.left < w->Kw ? w->W - at.left : w->Kw;
    return at;
}

#define WINDOW_KERNELS(T, SUFFIX)                                                                   \
    void patches_relaxed_##SUFFIX(const T *restrict P, const T *restrict ls, const T *restrict us,   \
                                  const T *restrict ub, int64_t map_image,                          \
                                  const int64_t *restrict image, const int64_t *restrict position,  \
                                  const int64_t *restrict shape, T *restrict out, T *restrict bias, \
                                  int threads) {                                                    \
        Windows w = windows_of(shape);                                                              \
        int64_t C = w.C, Kh = w.Kh, Kw = w.Kw, H = w.H, W = w.W;                                    \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if (w.R * C * Kh * Kw > GRAIN)") \
        for (int64_t r = 0; r < w.R; r++) {                                                         \
            Window at = window_at(&w, position[r]);                                                 \
            int64_t b0 = at.first, b1 = at.end, base = image[r] * map_image;                        \
            double total = 0;                                                                       \
            for (int64_t c = 0; c < C; c++)                                                         \
                for (int64_t a = 0; a < Kh; a++) {                                                  \
                    const T *restrict p = P + ((r * C + c) * Kh + a) * Kw;                          \
                    T *restrict o = out + ((r * C + c) * Kh + a) * Kw;                              \
                    int64_t y = at.top + a;                                                         \
                    if (y < 0 || y >= H || b1 <= b0) {                                              \
                        for (int64_t b = 0; b < Kw; b++) o[b] = (T)0;                               \
                        continue;                                                                   \
                    }                                                                               \
                    int64_t m = base + (c * H + y) * W + at.left;                                   \
                    for (int64_t b = 0; b < b0; b++) o[b] = (T)0;                                   \
                    _Pragma("omp simd reduction(+ : total)")                                        \
                    for (int64_t b = b0; b < b1; b++) {                                             \
                        T pi = p[b];                                                                \
                        T negative = pi < (T)0 ? pi : (T)0;                                         \
                        o[b] = pi > (T)0 ? pi * ls[m + b] : negative * us[m + b];                   \
                        total += negative * ub[m + b];                                              \
                    }                                                                               \
                    for (int64_t b = b1; b < Kw; b++) o[b] = (T)0;                                  \
                }                                                                                   \
            bias[r] = (T)total;                                                                     \
        }                                                                                           \
    }                                                                                               \
    void patches_bound_##SUFFIX(const T *restrict P, const T *restrict centre,                       \
                                const T *restrict radius, int64_t map_image,                        \
                                const int64_t *restrict image, const int64_t *restrict position,    \
                                const int64_t *restrict shape, T *restrict out, int threads) {      \
        Windows w = windows_of(shape);                                                              \
        int64_t C = w.C, Kh = w.Kh, Kw = w.Kw, H = w.H, W = w.W;                                    \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if (w.R * C * Kh * Kw > GRAIN)") \
        for (int64_t r = 0; r < w.R; r++) {                                                         \
            Window at = window_at(&w, position[r]);                                                 \
            int64_t base = image[r] * map_image;                                                    \
            double at_centre = 0, spread = 0;                                                       \
            for (int64_t c = 0; c < C; c++)                                                         \
                for (int64_t a = 0; a < Kh; a++) {                                                  \
                    int64_t y = at.top + a;                                                         \
                    if (y < 0 || y >= H) continue;                                                  \
                    const T *restrict p = P + ((r * C + c) * Kh + a) * Kw;                          \
                    int64_t m = base + (c * H + y) * W + at.left;                                   \
                    _Pragma("omp simd reduction(+ : at_centre, spread)")                            \
                    for (int64_t b = at.first; b < at.end; b++) {                                   \
                        T pi = p[b];                                                                \
                        at_centre += pi * centre[m + b];                                            \
                        spread += (pi < (T)0 ? -pi : pi) * radius[m + b];                           \
                    }                                                                               \
                }                                                                                   \
            out[r] = (T)(at_centre - spread);                                                       \
        }                                                                                           \
    }

WINDOW_KERNELS(float, f32)
WINDOW_KERNELS(double, f64)
