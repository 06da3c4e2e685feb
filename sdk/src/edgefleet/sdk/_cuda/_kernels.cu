// edgefleet GPU kernels, compiled at run time with NVRTC (see _nvrtc.py). No headers needed.
//
// ef_preprocess_<out>_<layout>: one launch per batch. Each thread writes one output pixel (3 channels)
// of one batch row: letterbox or stretch, bilinear resize with OpenCV INTER_LINEAR's sampling and
// fixed-point weights, BGR/RGB/NV12 input, channel order, (x - mean) / std, NCHW or NHWC, and
// float32 / float16 / uint8 output. Grid: (ceil(W/32), ceil(H/8), rows).
//
// ef_candidates: score threshold + bounded compaction for Ultralytics-layout detector outputs
// (N, 4 + C, A): only anchors whose best class score passes the threshold are copied back.
// ef_candidate_rows: the same for anchor-major scores (N, A, C) (NanoDet), with an optional companion
// tensor (N, A, R) (its box distributions) gathered for the same anchors.
// ef_top_k: the K largest values of each row of a classifier's (N, C) output and the row's
// log-sum-exp, so only (N, K) values come back.
// ef_gfl_boxes: a GFL head's (NanoDet) candidates with their boxes decoded: only (cell, class, score,
// box) records come back.

struct Row {                       // 64 bytes, mirrored by _ROW_DTYPE in _preprocess.py
    unsigned long long src;        // BGR/RGB: packed HWC rows; NV12: luma plane
    unsigned long long uv;         // NV12: interleaved chroma plane
    int src_w, src_h, pitch, uv_pitch;
    int fmt;                       // 0 BGR, 1 RGB, 2 NV12 BT.601, 3 NV12 BT.709 (limited range)
    int rw, rh, pad_x, pad_y;      // resized size and top-left offset inside the output
    float inv_sx, inv_sy;          // src_w / rw, src_h / rh
    int reserved;
};

__device__ __forceinline__ int clamp255(int v) { return v < 0 ? 0 : (v > 255 ? 255 : v); }

// One source pixel as B, G, R (0..255). NV12 uses OpenCV's fixed-point YUV420sp conversion.
__device__ __forceinline__ void fetch(const Row& r, int x, int y, int& b, int& g, int& rr) {
    const unsigned char* base = (const unsigned char*)r.src;
    if (r.fmt <= 1) {
        const unsigned char* p = base + (long long)y * r.pitch + x * 3;
        int c0 = p[0], c1 = p[1], c2 = p[2];
        if (r.fmt == 0) { b = c0; g = c1; rr = c2; } else { rr = c0; g = c1; b = c2; }
        return;
    }
    int Y = base[(long long)y * r.pitch + x];
    const unsigned char* c = (const unsigned char*)r.uv + (long long)(y >> 1) * r.uv_pitch + (x & ~1);
    int u = (int)c[0] - 128, v = (int)c[1] - 128;
    int cy, cvr, cvg, cug, cub;
    if (r.fmt == 2) { cy = 1220542; cvr = 1673527; cvg = -852492; cug = -409993; cub = 2116026; }
    else            { cy = 1220542; cvr = 1880096; cvg = -558891; cug = -223346; cub = 2214592; }
    int yy = max(0, Y - 16) * cy;
    const int half = 1 << 19;
    rr = clamp255((yy + half + cvr * v) >> 20);
    g = clamp255((yy + half + cvg * v + cug * u) >> 20);
    b = clamp255((yy + half + cub * u) >> 20);
}

// OpenCV's INTER_LINEAR sampling: half-pixel centres, clamped at the borders, and the two weights each
// rounded to 11 fractional bits on their own (they need not sum to exactly 2048).
__device__ __forceinline__ void sample_axis(int d, float inv_scale, int size, int& i0, int& i1, int& w0,
                                            int& w1) {
    float f = ((float)d + 0.5f) * inv_scale - 0.5f;
    int i = (int)floorf(f);
    f -= (float)i;
    if (i < 0) { f = 0.f; i = 0; }
    if (i >= size - 1) { f = 0.f; i = size - 1; }
    i0 = i;
    i1 = min(i + 1, size - 1);
    w0 = (int)rintf((1.f - f) * 2048.f);
    w1 = (int)rintf(f * 2048.f);
}

__device__ __forceinline__ unsigned short f32_to_f16(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

template <typename T> __device__ __forceinline__ T store_value(float v);
template <> __device__ __forceinline__ float store_value<float>(float v) { return v; }
template <> __device__ __forceinline__ unsigned short store_value<unsigned short>(float v) { return f32_to_f16(v); }
template <> __device__ __forceinline__ unsigned char store_value<unsigned char>(float v) { return (unsigned char)v; }

template <typename T, bool RAW, bool NHWC>
__device__ void preprocess(const Row* __restrict__ rows, T* __restrict__ out, int dst_w, int dst_h,
                           long long row_stride, float m0, float m1, float m2, float s0, float s1,
                           float s2, int o0, int o1, int o2, int pad) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= dst_w || y >= dst_h) return;
    const Row r = rows[blockIdx.z];
    int px[3];  // B, G, R of the canvas pixel, 0..255
    const int u = x - r.pad_x, v = y - r.pad_y;
    if (u < 0 || v < 0 || u >= r.rw || v >= r.rh) {
        px[0] = px[1] = px[2] = pad;
    } else {
        int x0, x1, wx0, wx1, y0, y1, wy0, wy1;
        sample_axis(u, r.inv_sx, r.src_w, x0, x1, wx0, wx1);
        sample_axis(v, r.inv_sy, r.src_h, y0, y1, wy0, wy1);
        int a[3], bq[3], c[3], d[3];
        fetch(r, x0, y0, a[0], a[1], a[2]);
        fetch(r, x1, y0, bq[0], bq[1], bq[2]);
        fetch(r, x0, y1, c[0], c[1], c[2]);
        fetch(r, x1, y1, d[0], d[1], d[2]);
        #pragma unroll
        for (int k = 0; k < 3; ++k) {
            // horizontal pass at 2^11, then OpenCV's vectorised vertical pass and its rounding
            int top = a[k] * wx0 + bq[k] * wx1;
            int bot = c[k] * wx0 + d[k] * wx1;
            px[k] = clamp255((((wy0 * (top >> 4)) >> 16) + ((wy1 * (bot >> 4)) >> 16) + 2) >> 2);
        }
    }
    const int src_idx[3] = {o0, o1, o2};
    const float mean[3] = {m0, m1, m2};
    const float scale[3] = {s0, s1, s2};
    T* base = out + (long long)blockIdx.z * row_stride;
    const long long plane = (long long)dst_w * dst_h;
    #pragma unroll
    for (int ch = 0; ch < 3; ++ch) {
        float val = (float)px[src_idx[ch]];
        if (!RAW) val = (val - mean[ch]) * scale[ch];
        long long idx = NHWC ? ((long long)y * dst_w + x) * 3 + ch : ch * plane + (long long)y * dst_w + x;
        base[idx] = store_value<T>(val);
    }
}

#define EF_PREPROCESS(NAME, T, RAW, NHWC)                                                              \
    extern "C" __global__ void NAME(const Row* rows, T* out, int dst_w, int dst_h, long long row_stride,  \
                                    float m0, float m1, float m2, float s0, float s1, float s2, int o0,   \
                                    int o1, int o2, int pad) {                                          \
        preprocess<T, RAW, NHWC>(rows, out, dst_w, dst_h, row_stride, m0, m1, m2, s0, s1, s2, o0, o1,  \
                                 o2, pad);                                                             \
    }

EF_PREPROCESS(ef_preprocess_f32_nchw, float, false, false)
EF_PREPROCESS(ef_preprocess_f32_nhwc, float, false, true)
EF_PREPROCESS(ef_preprocess_f16_nchw, unsigned short, false, false)
EF_PREPROCESS(ef_preprocess_f16_nhwc, unsigned short, false, true)
EF_PREPROCESS(ef_preprocess_u8_nchw, unsigned char, true, false)
EF_PREPROCESS(ef_preprocess_u8_nhwc, unsigned char, true, true)

__device__ __forceinline__ float load_score(const float* p) { return *p; }
__device__ __forceinline__ float load_score(const unsigned short* p) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(*p));
    return f;
}

// in: (N, 4 + C + E, A) channels-first: box, C class scores, E extra rows (mask coefficients, keypoints).
// out: (N, 4 + C + E, K) and index: (N, K) — the first count[n] columns are candidates (best class score
// >= threshold) and index their anchor numbers, in no particular order; count[n] may exceed K (then the
// caller falls back to the full tensor). Grid: (ceil(A/256), N), block 256.
template <typename T>
__device__ void candidates(const T* __restrict__ in, T* __restrict__ out, int* __restrict__ index,
                           int* __restrict__ count, int C, int E, int A, int K, float threshold) {
    const int a = blockIdx.x * blockDim.x + threadIdx.x;
    const int n = blockIdx.y;
    if (a >= A) return;
    const int rows = 4 + C + E;
    const T* src = in + (long long)n * rows * A;
    float best = -1.f;
    for (int c = 0; c < C; ++c) best = fmaxf(best, load_score(src + (long long)(4 + c) * A + a));
    if (best < threshold) return;
    int slot = atomicAdd(count + n, 1);
    if (slot >= K) return;
    T* dst = out + (long long)n * rows * K;
    for (int k = 0; k < rows; ++k) dst[(long long)k * K + slot] = src[(long long)k * A + a];
    index[(long long)n * K + slot] = a;
}

extern "C" __global__ void ef_candidates_f32(const float* in, float* out, int* index, int* count, int C, int E,
                                             int A, int K, float threshold) {
    candidates<float>(in, out, index, count, C, E, A, K, threshold);
}
extern "C" __global__ void ef_candidates_f16(const unsigned short* in, unsigned short* out, int* index,
                                             int* count, int C, int E, int A, int K, float threshold) {
    candidates<unsigned short>(in, out, index, count, C, E, A, K, threshold);
}

// scores: (N, A, C); comp: (N, A, R) or null with R = 0. out: (N, K, C), out_comp: (N, K, R),
// index: (N, K): the first count[n] rows are the anchors with any score >= threshold, in no particular
// order; count[n] may exceed K. One warp per anchor (coalesced reads of its C scores).
// Grid: (ceil(A/8), N), block 256 (8 warps).
template <typename T>
__device__ void candidate_rows(const T* __restrict__ scores, const T* __restrict__ comp, T* __restrict__ out,
                               T* __restrict__ out_comp, int* __restrict__ index, int* __restrict__ count,
                               int A, int C, int R, int K, float threshold) {
    const int lane = threadIdx.x & 31;
    const int a = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int n = blockIdx.y;
    if (a >= A) return;
    const T* row = scores + ((long long)n * A + a) * C;
    float best = -1.f;
    for (int c = lane; c < C; c += 32) best = fmaxf(best, load_score(row + c));
    for (int off = 16; off > 0; off >>= 1) best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, off));
    if (best < threshold) return;
    int slot = 0;
    if (lane == 0) slot = atomicAdd(count + n, 1);
    slot = __shfl_sync(0xffffffffu, slot, 0);
    if (slot >= K) return;
    T* dst = out + ((long long)n * K + slot) * C;
    for (int c = lane; c < C; c += 32) dst[c] = row[c];
    if (R > 0) {
        const T* crow = comp + ((long long)n * A + a) * R;
        T* cdst = out_comp + ((long long)n * K + slot) * R;
        for (int r = lane; r < R; r += 32) cdst[r] = crow[r];
    }
    if (lane == 0) index[(long long)n * K + slot] = a;
}

extern "C" __global__ void ef_candidate_rows_f32(const float* scores, const float* comp, float* out,
                                                 float* out_comp, int* index, int* count, int A, int C, int R,
                                                 int K, float threshold) {
    candidate_rows<float>(scores, comp, out, out_comp, index, count, A, C, R, K, threshold);
}
extern "C" __global__ void ef_candidate_rows_f16(const unsigned short* scores, const unsigned short* comp,
                                                 unsigned short* out, unsigned short* out_comp, int* index,
                                                 int* count, int A, int C, int R, int K, float threshold) {
    candidate_rows<unsigned short>(scores, comp, out, out_comp, index, count, A, C, R, K, threshold);
}

// in: (N, C). out: (N, 2K + 2) 32-bit words per row, so one copy brings everything back: [0, K) the
// row's K largest values as float32, largest first (ties: lower index first); [K, 2K) their columns as
// int32; 2K the row's log-sum-exp (NaN when any value is not finite); 2K + 1 its minimum. One block
// per row, the row held in shared memory (C floats). Grid: (N), block 256, dynamic shared memory C * 4.
#define EF_INF __int_as_float(0x7f800000)  // NVRTC compiles without headers: no INFINITY or NAN
#define EF_NAN __int_as_float(0x7fffffff)

__device__ __forceinline__ void argmax_pair(float& v, int& i, float ov, int oi) {
    if (ov > v || (ov == v && oi < i)) { v = ov; i = oi; }
}

template <typename T>
__device__ void top_k(const T* __restrict__ in, float* __restrict__ out, int C, int K) {
    extern __shared__ float row[];
    __shared__ float red_v[32];
    __shared__ int red_i[32];
    __shared__ float red_s[32];
    __shared__ float red_m[32];
    const int n = blockIdx.x;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, warps = (blockDim.x + 31) >> 5;
    const T* src = in + (long long)n * C;
    float* dst = out + (long long)n * (2 * K + 2);
    int* dst_index = (int*)(dst + K);
    float mx = -EF_INF, mn = EF_INF;
    int bad = 0;
    for (int c = t; c < C; c += blockDim.x) {
        float v = load_score(src + c);
        row[c] = v;
        bad |= !(fabsf(v) <= 3.402823466e38f);  // NaN or +-inf
        mx = fmaxf(mx, v);
        mn = fminf(mn, v);
    }
    for (int off = 16; off > 0; off >>= 1) {
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, off));
        bad |= __shfl_xor_sync(0xffffffffu, bad, off);
    }
    if (lane == 0) { red_v[warp] = mx; red_i[warp] = bad; red_m[warp] = mn; }
    __syncthreads();
    if (t == 0) {
        for (int w = 1; w < warps; ++w) {
            red_v[0] = fmaxf(red_v[0], red_v[w]);
            red_i[0] |= red_i[w];
            red_m[0] = fminf(red_m[0], red_m[w]);
        }
    }
    __syncthreads();
    mx = red_v[0];
    bad = red_i[0];
    mn = red_m[0];
    float sum = 0.f;
    for (int c = t; c < C; c += blockDim.x) sum += expf(row[c] - mx);
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0) red_s[warp] = sum;
    __syncthreads();
    if (t == 0) {
        float s = 0.f;
        for (int w = 0; w < warps; ++w) s += red_s[w];
        dst[2 * K] = bad ? EF_NAN : mx + logf(s);
        dst[2 * K + 1] = mn;
    }
    // K rounds of a block-wide arg-max (NaN never wins); each winner is taken out of the row
    for (int k = 0; k < K; ++k) {
        float bv = -EF_INF;
        int bi = 0x7fffffff;
        for (int c = t; c < C; c += blockDim.x) argmax_pair(bv, bi, row[c], c);
        for (int off = 16; off > 0; off >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, off);
            int oi = __shfl_xor_sync(0xffffffffu, bi, off);
            argmax_pair(bv, bi, ov, oi);
        }
        __syncthreads();  // everyone is past the previous round's reads of red_* and row
        if (lane == 0) { red_v[warp] = bv; red_i[warp] = bi; }
        __syncthreads();
        if (t == 0) {
            float v = red_v[0];
            int i = red_i[0];
            for (int w = 1; w < warps; ++w) argmax_pair(v, i, red_v[w], red_i[w]);
            if (i == 0x7fffffff) { i = k; v = EF_NAN; }  // nothing left but NaNs (the row is marked bad)
            dst[k] = v;
            dst_index[k] = i;
            if (i < C) row[i] = EF_NAN;  // taken: NaN never wins a comparison
        }
        __syncthreads();
    }
}

extern "C" __global__ void ef_top_k_f32(const float* in, float* out, int C, int K) { top_k<float>(in, out, C, K); }
extern "C" __global__ void ef_top_k_f16(const unsigned short* in, float* out, int C, int K) {
    top_k<unsigned short>(in, out, C, K);
}

// A GFL head's stride (NanoDet): scores (N, A, C) and box distributions (N, A, 4 * bins) -> records of
// 8 32-bit words [cell, class, score, x1, y1, x2, y2, 0] appended to out (N, K, 8), count[n] of them
// (every stride of a batch appends to the same records; count[n] may exceed K, then the caller falls back
// to the full tensors). A record per (cell, class) with score > threshold (multi_label), or per cell for
// its best class (lowest index on ties). The box: each side's distance is the expectation of the softmax
// over its bins, times the stride, from the cell centre ((x + 0.5) * stride, (y + 0.5) * stride), cell
// numbers offset by `first` (strides numbered one after the other). nonfinite[n] counts cells with a
// score (or a kept cell's distribution) that is NaN or infinite. One warp per cell.
// Grid: (ceil(A/8), N), block 256.
template <typename T>
__device__ void gfl_boxes(const T* __restrict__ scores, const T* __restrict__ reg, float* __restrict__ out,
                          int* __restrict__ count, int* __restrict__ nonfinite, int A, int C, int bins,
                          int grid_w, float stride, int first, int K, float threshold, int multi_label) {
    const int lane = threadIdx.x & 31;
    const int a = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int n = blockIdx.y;
    if (a >= A) return;
    const T* row = scores + ((long long)n * A + a) * C;
    float best = -EF_INF;
    int bi = 0x7fffffff, bad = 0;
    for (int c = lane; c < C; c += 32) {
        float v = load_score(row + c);
        bad |= !(fabsf(v) <= 3.402823466e38f);
        argmax_pair(best, bi, v, c);
    }
    for (int off = 16; off > 0; off >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, off);
        int oi = __shfl_xor_sync(0xffffffffu, bi, off);
        argmax_pair(best, bi, ov, oi);
        bad |= __shfl_xor_sync(0xffffffffu, bad, off);
    }
    if (bad && lane == 0) atomicAdd(nonfinite + n, 1);
    if (!(best > threshold)) return;  // strictly above, as the host decoder compares
    float d = 0.f;
    if (lane < 4) {  // lane s: side s (left, top, right, bottom)
        const T* r = reg + ((long long)n * A + a) * (4 * bins) + lane * bins;
        float m = -EF_INF;
        for (int i = 0; i < bins; ++i) m = fmaxf(m, load_score(r + i));
        float sum = 0.f;
        for (int i = 0; i < bins; ++i) sum += expf(load_score(r + i) - m);
        float acc = 0.f;
        for (int i = 0; i < bins; ++i) acc += (expf(load_score(r + i) - m) / sum) * (float)i;
        d = acc * stride;
    }
    const float left = __shfl_sync(0xffffffffu, d, 0), top = __shfl_sync(0xffffffffu, d, 1);
    const float right = __shfl_sync(0xffffffffu, d, 2), bottom = __shfl_sync(0xffffffffu, d, 3);
    if (lane == 0 && !(fabsf(left + top + right + bottom) <= 3.402823466e38f)) atomicAdd(nonfinite + n, 1);
    const float cx = ((float)(a % grid_w) + 0.5f) * stride, cy = ((float)(a / grid_w) + 0.5f) * stride;
    float* base = out + (long long)n * K * 8;
    for (int c = lane; c < C; c += 32) {
        float v = load_score(row + c);
        if (multi_label ? !(v > threshold) : c != bi) continue;
        int slot = atomicAdd(count + n, 1);
        if (slot >= K) continue;
        float* rec = base + (long long)slot * 8;
        ((int*)rec)[0] = first + a;
        ((int*)rec)[1] = c;
        rec[2] = v;
        rec[3] = cx - left;
        rec[4] = cy - top;
        rec[5] = cx + right;
        rec[6] = cy + bottom;
        rec[7] = 0.f;
    }
}

extern "C" __global__ void ef_gfl_boxes_f32(const float* scores, const float* reg, float* out, int* count,
                                            int* nonfinite, int A, int C, int bins, int grid_w, float stride,
                                            int first, int K, float threshold, int multi_label) {
    gfl_boxes<float>(scores, reg, out, count, nonfinite, A, C, bins, grid_w, stride, first, K, threshold,
                     multi_label);
}
extern "C" __global__ void ef_gfl_boxes_f16(const unsigned short* scores, const unsigned short* reg, float* out,
                                            int* count, int* nonfinite, int A, int C, int bins, int grid_w,
                                            float stride, int first, int K, float threshold, int multi_label) {
    gfl_boxes<unsigned short>(scores, reg, out, count, nonfinite, A, C, bins, grid_w, stride, first, K,
                              threshold, multi_label);
}

// NMS over one frame's GFL records, what the host decoder does after them (_detection._per_frame):
// records whose class class_ok allows (all when null), ordered best score first (ties: lower cell, then
// lower class: the host's candidate order), the first top_k of them, greedy suppression within a class
// (a box goes when a kept box of its class overlaps it by IoU not <= iou, the IoU computed as numpy does
// it in float32), at most D kept. out: (N, D, 8) the kept records best first, out_count[n] their number,
// or -1 when the frame has more than EF_NMS_MAX records (the host then does it). One block per frame.
#define EF_NMS_MAX 2048

__device__ __forceinline__ bool nms_before(float sa, int ta, float sb, int tb) {
    return sa > sb || (sa == sb && ta < tb);
}

extern "C" __global__ void ef_gfl_nms(const float* __restrict__ records, const int* __restrict__ count,
                                      float* __restrict__ out, int* __restrict__ out_count,
                                      const unsigned char* __restrict__ class_ok, int K, int D, int top_k,
                                      float iou, int classes) {
    __shared__ float s_score[EF_NMS_MAX];
    __shared__ int s_tie[EF_NMS_MAX];
    __shared__ short s_idx[EF_NMS_MAX];
    __shared__ unsigned char s_state[EF_NMS_MAX];  // 0 alive, 1 suppressed, 2 kept
    __shared__ int s_valid, s_kept;
    const int n = blockIdx.x, t = threadIdx.x;
    const int m = count[n];
    if (m > K || m > EF_NMS_MAX) {
        if (t == 0) out_count[n] = -1;
        return;
    }
    int P = 1;
    while (P < m) P <<= 1;
    const float* rec = records + (long long)n * K * 8;
    if (t == 0) { s_valid = 0; s_kept = 0; }
    __syncthreads();
    for (int i = t; i < P; i += blockDim.x) {
        float sc = -EF_INF;
        int tie = 0x7fffffff;
        if (i < m) {
            const int* r = (const int*)(rec + (long long)i * 8);
            const int cell = r[0], cls = r[1];
            if (class_ok == 0 || class_ok[cls]) {
                sc = rec[(long long)i * 8 + 2];
                tie = cell * classes + cls;
                atomicAdd(&s_valid, 1);
            }
        }
        s_score[i] = sc;
        s_tie[i] = tie;
        s_idx[i] = (short)i;
        s_state[i] = 0;
    }
    __syncthreads();
    for (int k = 2; k <= P; k <<= 1) {  // bitonic sort into nms_before order
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = t; i < P; i += blockDim.x) {
                const int x = i ^ j;
                if (x <= i) continue;
                const bool forward = (i & k) == 0;
                const bool swap = forward ? nms_before(s_score[x], s_tie[x], s_score[i], s_tie[i])
                                          : nms_before(s_score[i], s_tie[i], s_score[x], s_tie[x]);
                if (swap) {
                    float fs = s_score[i]; s_score[i] = s_score[x]; s_score[x] = fs;
                    int ti = s_tie[i]; s_tie[i] = s_tie[x]; s_tie[x] = ti;
                    short si = s_idx[i]; s_idx[i] = s_idx[x]; s_idx[x] = si;
                }
            }
            __syncthreads();
        }
    }
    const int L = min(s_valid, top_k);
    for (int i = 0; i < L; ++i) {
        if (s_state[i] != 0) continue;  // the same for every thread: settled before this round
        if (s_kept >= D) break;
        __syncthreads();  // every thread has read s_kept
        if (t == 0) { s_state[i] = 2; s_kept += 1; }
        const float* bi = rec + (long long)s_idx[i] * 8;
        const int ci = ((const int*)bi)[1];
        const float ax1 = bi[3], ay1 = bi[4], ax2 = bi[5], ay2 = bi[6];
        // __fmul_rn / __fadd_rn: never fused into an FMA (this file is compiled with fast math), so the
        // IoU rounds exactly as numpy's float32 does and the same boxes are kept
        const float area_i = __fmul_rn(fmaxf(ax2 - ax1, 0.f), fmaxf(ay2 - ay1, 0.f));
        for (int j = i + 1 + t; j < L; j += blockDim.x) {
            if (s_state[j] != 0) continue;
            const float* bj = rec + (long long)s_idx[j] * 8;
            if (((const int*)bj)[1] != ci) continue;
            const float bx1 = bj[3], by1 = bj[4], bx2 = bj[5], by2 = bj[6];
            const float area_j = __fmul_rn(fmaxf(bx2 - bx1, 0.f), fmaxf(by2 - by1, 0.f));
            const float w = fmaxf(fminf(ax2, bx2) - fmaxf(ax1, bx1), 0.f);
            const float h = fmaxf(fminf(ay2, by2) - fmaxf(ay1, by1), 0.f);
            const float inter = __fmul_rn(w, h);
            const float uni = __fsub_rn(__fadd_rn(area_i, area_j), inter);
            const float ov = uni > 0.f ? __fdiv_rn(inter, uni) : 0.f;  // IEEE division, as numpy's, under fast math
            if (!(ov <= iou)) s_state[j] = 1;
        }
        __syncthreads();
    }
    __syncthreads();
    if (t == 0) {
        float* dst = out + (long long)n * D * 8;
        int r = 0;
        for (int i = 0; i < L && r < D; ++i) {
            if (s_state[i] != 2) continue;
            const float* src = rec + (long long)s_idx[i] * 8;
            for (int w = 0; w < 8; ++w) dst[(long long)r * 8 + w] = src[w];
            ++r;
        }
        out_count[n] = r;
    }
}
