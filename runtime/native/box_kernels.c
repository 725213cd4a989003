/* The memory-bound elementwise steps of a Box training step, each in one pass:
 * the interval ReLU of a Box (center, radius), forward and backward, the Box linear layer's weight
 * gradient `grad += sign(weight) * product` (the radius path's part, through |W|), and CROWN's linear
 * relaxation of ReLU on interval bounds with its gradient (a CROWN-IBP step's relaxations).
 *
 * The composed ATen version (runtime/layers/activation.py, _BoxReLU) takes three passes over the
 * tensors forward and seven backward; these loops read each input once and write each output once.
 * They compute the same floating-point operations in the same order as the ATen version, so the
 * results are bitwise equal (tests/runtime/test_native.py checks this).
 *
 * The arrays are the flat storage of tensors with identical strides (the caller checks), so element i
 * of every array is the same neuron. Loops run on OpenMP threads: in a PyTorch process libgomp.so.1
 * is PyTorch's own, so these loops share its thread pool instead of competing with it.
 *
 * Comparisons are written so that NaN behaves as in ATen's threshold_backward (`x <= 0 ? 0 : g`).
 * Built with -fno-trapping-math: otherwise the compiler keeps the selects as branches and the loops
 * stay scalar (measured 4x slower than vectorised).
 */
#include <stdint.h>

#define GRAIN 32768

#define BOX_RELU(T, SUFFIX)                                                                         \
    void box_relu_forward_##SUFFIX(const T *restrict c, const T *restrict r, T *restrict out_c,     \
                                   T *restrict out_r, int64_t n, int threads) {                     \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if (n > GRAIN)")            \
        for (int64_t i = 0; i < n; i++) {                                                           \
            T ci = c[i], ri = r[i];                                                                 \
            /* lerp(c, r, 0.5) as ATen computes it for weight >= 0.5 */                             \
            T h = ri - (ri - ci) * (T)0.5;                                                          \
            T nr = h < (T)0 ? (T)0 : h;                                                             \
            nr = nr > ri ? ri : nr;                                                                 \
            out_r[i] = nr;                                                                          \
            out_c[i] = ci > nr ? ci : nr;                                                           \
        }                                                                                           \
    }                                                                                               \
    /* c, r: the forward's outputs; grad_*: the gradients of those; out_*: of its inputs */         \
    void box_relu_backward_##SUFFIX(const T *restrict grad_c, const T *restrict grad_r,             \
                                    const T *restrict c, const T *restrict r, T *restrict out_c,    \
                                    T *restrict out_r, int64_t n, int threads) {                    \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if (n > GRAIN)")            \
        for (int64_t i = 0; i < n; i++) {                                                           \
            T gc = grad_c[i], gr = grad_r[i], ci = c[i], ri = r[i];                                 \
            T shared = gr - (gr - gc) * (T)0.5;                                                     \
            T half_diff = gc - shared;                                                              \
            T upper = ci <= (T)0 ? (T)0 : shared;                                                   \
            T active = ci - ri <= (T)0 ? (T)0 : half_diff;                                          \
            out_c[i] = upper + active;                                                              \
            out_r[i] = upper - active;                                                              \
        }                                                                                           \
    }

BOX_RELU(float, f32)
BOX_RELU(double, f64)

/* grad += sign(weight) * product over row-major matrices (rows x cols, leading dimensions ld_*), as
 * grad.addcmul_(torch.sign(weight), product) computes it, without the sign matrix: one pass over three
 * weight-sized matrices instead of two passes over five. */
#define ADD_SIGNED_PRODUCT(T, SUFFIX)                                                               \
    void add_signed_product_##SUFFIX(T *restrict grad, int64_t ld_grad, const T *restrict weight,   \
                                     int64_t ld_weight, const T *restrict product,                 \
                                     int64_t ld_product, int64_t rows, int64_t cols, int threads) { \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if (rows * cols > GRAIN)")  \
        for (int64_t i = 0; i < rows; i++) {                                                        \
            T *restrict g = grad + i * ld_grad;                                                     \
            const T *restrict w = weight + i * ld_weight;                                           \
            const T *restrict p = product + i * ld_product;                                         \
            for (int64_t j = 0; j < cols; j++) {                                                    \
                T wj = w[j], pj = p[j];                                                             \
                T signed_p = wj > (T)0 ? pj : (wj < (T)0 ? -pj : (T)0);                             \
                g[j] = g[j] + signed_p;                                                             \
            }                                                                                       \
        }                                                                                           \
    }

ADD_SIGNED_PRODUCT(float, f32)
ADD_SIGNED_PRODUCT(double, f64)

/* CROWN's relaxation of relu on [l, u] (runtime/layers/activation.py, crown_relaxation, without outward
 * rounding): ls x <= relu(x) <= us x + ub, with us = max(u, 0) / (max(u, 0) - min(l, 0)) (a width of 0,
 * l = u = 0, taken as 1), ub = -min(l, 0) us, ls = 1 where l >= 0 or (l < 0 < u and u > -l), and exact =
 * not (l < 0 < u). The same operations in the same order as the composed ATen ops, in two passes over l
 * and u where those take seven.
 * Backward: only an unstable neuron's us = u / (u - l) and ub = -l u / (u - l) depend on its bounds; with
 * w = u - l, d us/d l = us / w, d us/d u = (1 - us) / w (as -l / w = 1 - us), d ub/d l = -us u / w and
 * d ub/d u = -(1 - us) l / w. Stable neurons' lines are constant (their gradient 0); NaN bounds count as
 * unstable, so that their gradient is NaN as autograd's would be. */
#define CROWN_RELU(T, SUFFIX)                                                                       \
    void crown_relu_forward_##SUFFIX(const T *restrict l, const T *restrict u, T *restrict ls,      \
                                     T *restrict us, T *restrict ub, uint8_t *restrict exact,       \
                                     int64_t n, int threads) {                                      \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if (n > GRAIN)")            \
        for (int64_t i = 0; i < n; i++) {                                                           \
            T li = l[i], ui = u[i];                                                                 \
            T low = li > (T)0 ? (T)0 : li;  /* clamp(max=0), NaN kept */                            \
            T high = ui < (T)0 ? (T)0 : ui; /* clamp(min=0), NaN kept */                            \
            T width = high - low;                                                                   \
            width = width == (T)0 ? (T)1 : width;                                                   \
            T slope = high / width;                                                                 \
            int unstable = (li < (T)0) & (ui > (T)0);                                               \
            us[i] = slope;                                                                          \
            ub[i] = -low * slope;                                                                   \
            ls[i] = ((li >= (T)0) | (unstable & (ui > -li))) ? (T)1 : (T)0;                         \
        }                                                                                           \
        /* A loop of its own: with the byte store in the loop above, gcc vectorises neither. */     \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if (n > GRAIN)")            \
        for (int64_t i = 0; i < n; i++) {                                                           \
            exact[i] = !((l[i] < (T)0) & (u[i] > (T)0));                                            \
        }                                                                                           \
    }                                                                                               \
    void crown_relu_backward_##SUFFIX(const T *restrict l, const T *restrict u,                     \
                                      const T *restrict grad_us, const T *restrict grad_ub,         \
                                      T *restrict grad_l, T *restrict grad_u, int64_t n,            \
                                      int threads) {                                                \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if (n > GRAIN)")            \
        for (int64_t i = 0; i < n; i++) {                                                           \
            T li = l[i], ui = u[i], gs = grad_us[i], gb = grad_ub[i];                               \
            int unstable = !((li >= (T)0) | (ui <= (T)0));                                          \
            T width = ui - li; /* > 0 where unstable; the other lanes' quotients are not kept */     \
            T slope = ui / width;                                                                   \
            T to_l = slope * (gs - ui * gb) / width;                                                \
            T to_u = ((T)1 - slope) * (gs - li * gb) / width;                                       \
            grad_l[i] = unstable ? to_l : (T)0;                                                     \
            grad_u[i] = unstable ? to_u : (T)0;                                                     \
        }                                                                                           \
    }

CROWN_RELU(float, f32)
CROWN_RELU(double, f64)
