/* The CPU engine's private types (not installed): the handle API that
 * kl_lstm_forward runs on, the packed LSTM and its layers, the input projection's
 * strategies and the per-call plan.
 *
 * A call (kl_lstm_run_views, lstm.c) makes one plan (plan.c): buffers, thread
 * split, batch order. It then runs the layers one by one. For each layer, one
 * pool job projects the inputs (inproj.c: the first strategy of the list that
 * applies) and then runs the recurrence (recurrence.c). Packing is in pack.c.
 *
 * Packed layouts (Hp = round_up(H, 16), Pp = round_up(P, 16)):
 *   W_ih  [D*4*Hp, I] io type, row d*4*Hp + g*Hp + u (zero rows for u >= H);
 *         not held when borrowed (kl_lstm_pack): every run then reads the
 *         caller's W_ih in place
 *   W_hh  f32/f64/f16: [(blk*R + k)*64 + g*16 + lane];  bf16: see bf16-lstmcell-scalar.c
 *   W_hr  f32/f64/f16: [(blk*H + j)*16 + lane];         bf16: see bf16-lstmproj-scalar.c
 *   bias  [4*Hp] = b_ih + b_hh
 *   W_ih forms of the input projection's strategies (inproj.c), besides W_ih:
 *         bfloat16 64-column panels (bf16-gemm-avx512bf16.c), or float32
 *         32-column panels over the D*4*Hp gate columns (KL_PGEMM_NR) */
#ifndef KL_ENGINE_H
#define KL_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>

#include "internal.h"

/* ---- the handle API: describe -> pack -> run -> free ----------------------
 * Internal: kl_lstm_forward (the public entry) runs on it through the weight
 * cache; the C test drives it directly. Semantics are torch.nn.LSTM's. A
 * packed kl_lstm is immutable: it may be run from several threads at once. */
typedef struct kl_lstm_desc {
  int input_size;    /* I of the first layer */
  int hidden_size;   /* H */
  int num_layers;    /* L >= 1 */
  int bidirectional; /* 0 or 1: D = 1 or 2 */
  int proj_size;     /* 0 (none) or 0 < P < H */
  int reverse;       /* unidirectional only: run the one direction backwards */
  kl_dtype dtype;
} kl_lstm_desc;

/* Size in bytes of one element of the input/output/state arrays. */
size_t kl_dtype_io_size(kl_dtype dt);

/* Weights of one (layer, direction), row-major and contiguous, in the io
 * element type of the dtype (float for KL_F32/KL_BF16/KL_F16, double for KL_F64).
 * R = proj_size ? proj_size : hidden_size; I_l = layer 0 ? input_size : D*R. */
typedef struct kl_weights {
  const void* w_ih; /* [4H, I_l] */
  const void* w_hh; /* [4H, R] */
  const void* b_ih; /* [4H] or NULL */
  const void* b_hh; /* [4H] or NULL */
  const void* w_hr; /* [P, H], required iff proj_size > 0 */
} kl_weights;

typedef struct kl_lstm kl_lstm;

/* weights: num_layers * D entries, index layer * D + direction. */
kl_status kl_lstm_create(const kl_lstm_desc* desc, const kl_weights* weights, kl_lstm** out);
void kl_lstm_free(kl_lstm* lstm);
const kl_lstm_desc* kl_lstm_get_desc(const kl_lstm* lstm);

/* One run. Strides are in elements (not bytes).
 * x[t, b, i] = x + t*x_st + b*x_sb + i          (feature stride 1)
 * y[t, b, j] = y + t*y_st + b*y_sb + j, j < D*R (feature stride 1)
 * The rows of x must be a single strided sequence: x_st == B*x_sb (seq-major),
 * x_sb == T*x_st (batch-major), or T == 1 or B == 1; the same for y. */
typedef struct kl_run_args {
  int64_t T, B;
  const void* x;
  int64_t x_st, x_sb;
  void* y;
  int64_t y_st, y_sb;
  const void* h0;         /* [L*D, B, R] contiguous, or NULL for zeros */
  const void* c0;         /* [L*D, B, H] contiguous, or NULL for zeros */
  void* h_n;              /* [L*D, B, R] contiguous, or NULL */
  void* c_n;              /* [L*D, B, H] contiguous, or NULL */
  const int64_t* lengths; /* [B], each in 1..T, or NULL for all T */
  int num_threads;        /* >= 1: every thread used, BLAS included */
  int x_gates;            /* as kl_forward_args.x_gates */
  const void* gate_bias;  /* as kl_forward_args.gate_bias */
  int (*interrupt)(void* ctx); /* as kl_forward_args.interrupt */
  void* interrupt_ctx;
} kl_run_args;

kl_status kl_lstm_run(const kl_lstm* lstm, const kl_run_args* args);

/* ---- packed weights (pack.c) ---------------------------------------------- */

/* The forms of W_ih an input-projection strategy may hold in a packed layer. */
typedef enum kl_wih_form { KL_WIH_BF16 = 0, KL_WIH_PANELS = 1, KL_WIH_FORMS = 2 } kl_wih_form;

typedef struct kl_layer {
  size_t in_size;                 /* input features of this layer */
  void* w_ih;                     /* packed, io type, or NULL when borrowed */
  void* w_ih_form[KL_WIH_FORMS];  /* the strategies' forms of W_ih, or NULL */
  void* w_hh[2];                  /* panels, weight type */
  void* bias[2];                  /* io type */
  void* w_hr[2];                  /* panels, weight type, or NULL */
} kl_layer;

struct kl_lstm {
  kl_lstm_desc desc;
  int D;
  size_t H, Hp, R, Rs, P, Pp;
  size_t esz;  /* io element size */
  size_t wesz; /* panel element size */
  kl_wtype wt;
  kl_kernels k;
  int borrowed; /* W_ih is read from the caller's memory on every run */
  size_t bytes; /* held by the packed weights */
  kl_layer* layers;
};

/* W_ih as the input GEMM reads it for one (layer, direction): gate g's H rows
 * start at w + g*gstride*ld, row stride ld (elements). */
typedef struct kl_wih_view {
  const void* w;
  int64_t ld, gstride;
} kl_wih_view;

/* Packs. Flags: KL_PACK_BORROW_WIH: the packed object holds no W_ih copy
 * (float32/float64 without the bfloat16 GEMM) and every run must pass views of
 * it; KL_PACK_WIH_PANELS: float32 W_ih is also held in 32-column panels for the
 * f32-pgemm kernels, only for weights that cannot change behind the object (a
 * private copy or a trusted entry: the panels are not fingerprinted). */
#define KL_PACK_BORROW_WIH 1
#define KL_PACK_WIH_PANELS 2
kl_status kl_lstm_pack(const kl_lstm_desc* desc, const kl_wsrc* w, int flags, kl_lstm** out);
/* 1 if kl_lstm_pack(KL_PACK_BORROW_WIH) would borrow W_ih for this desc. */
int kl_lstm_can_borrow_wih(const kl_lstm_desc* desc);
/* Bytes held by a packed object. */
size_t kl_lstm_packed_bytes(const kl_lstm* m);
/* kl_lstm_run with W_ih views ([num_layers * D], or NULL for the packed W_ih). */
kl_status kl_lstm_run_views(const kl_lstm* m, const kl_run_args* a, const kl_wih_view* wih);
/* 64-byte aligned, zeroed; at least 64 bytes. */
void* kl_xalloc(size_t bytes);

/* ---- the recurrence's split of a direction's threads (recurrence.c) -------
 * A direction group of p threads is a grid of cg chunk groups x u unit
 * threads: batch elements go in chunks of KL_CHUNK (in decreasing-length
 * order), chunk c to chunk group c % cg, and the u threads of a chunk group
 * split its hidden units, with a barrier per step. */
#define KL_CHUNK 16
/* Unit threads of a chunk group of fewer than KL_CHUNK rows at most: each step
 * waits for the group's slowest thread, so more threads pay only while the
 * per-step barrier stays cheap against a thread's share of W_hh. */
#define KL_UNIT_SPLIT_SMALL 8
typedef struct kl_split {
  int cg, u; /* chunk groups, unit threads per chunk group; cg * u <= p */
} kl_split;
kl_split kl_plan_split(int p, int64_t B, size_t Hp);
/* Threads per direction for the recurrence: all of them, split by kl_plan_split. */
static inline int kl_threads_per_direction(int nth, int D) { return nth >= D ? nth / D : 1; }
/* Thread i's share [lo, hi) of n items dealt to p threads. */
static inline void kl_share(size_t n, int i, int p, size_t* lo, size_t* hi) {
  *lo = n * (size_t)i / (size_t)p;
  *hi = n * (size_t)(i + 1) / (size_t)p;
}

/* ---- the per-call plan (plan.c) -------------------------------------------- */
struct kl_inproj;

typedef struct kl_plan {
  /* the call, made once by kl_plan_make */
  const kl_lstm* m;
  const kl_wih_view* wih; /* the caller's W_ih views ([L * D]) when borrowed */
  int64_t T, B;
  int nth;            /* threads of every layer's pool job */
  kl_split sp;        /* each direction group's split (nth >= D) */
  int64_t ld0, gt0, gb0; /* layer 0's input rows: row (t, b) = t*gt0 + b*gb0, stride ld0 */
  int gates_in_place; /* layer 0 reads the caller's gates (x_gates) where they lie */
  int64_t* len;       /* [B] */
  int32_t* ord;       /* [B], batch indices by decreasing length (then [B] sort buffer) */
  char* Gbuf;         /* the input gates [T*B][D*4*Hp], or NULL */
  char* inter[2];     /* layer outputs between layers, [T, B, D*R] each */
  char* state;        /* [D][B][2*Rs + 2*Hp] */
  uint8_t* ws;        /* the input projection's work space (its strategies' scratch) */
  size_t G_cap, inter_cap[2], ws_cap;
  kl_barrier* bar;    /* [D][cg] per-step barrier of each (direction, chunk group) */
  kl_barrier* gbar;   /* all threads, after the input projection */
  kl_barrier_slot* slots;
  /* per-thread scratch */
  kl_cell_row* rows;  /* [nth][B] */
  const void** ptrs;  /* [nth][3B] */
  int32_t* mine;      /* [nth][B] */
  /* stopping early (kl_run_args.interrupt, kl_plan_poll): the caller's thread
   * asks the callback between input-projection tiles and every
   * KL_INTERRUPT_STEPS steps, and sets stop; each chunk group's unit thread 0
   * copies stop to gstop[its barrier] before the step's last barrier, so that
   * all its threads leave after the same step; thread 0 copies it to
   * gstop[gbar] before the barrier after the input projection, so that all
   * threads skip the recurrence or none does */
  int (*interrupt)(void*);
  void* interrupt_ctx;
  pthread_t caller;
  atomic_int* stop;   /* &stop_flag */
  int* gstop;         /* [D][cg] */
  atomic_int stop_flag;
  kl_wih_view own[2]; /* views of the packed W_ih (not borrowed) */

  /* the layer, set by kl_plan_layer */
  const kl_layer* L;
  const kl_wih_view* wv; /* [D]: this layer's W_ih, as the GEMM reads it */
  const struct kl_inproj* ip;   /* the strategy that computes the gates */
  const struct kl_inproj* ip_next; /* the next one that applies (x6's fallback) */
  /* layer input rows: row (t, b) = t*gt + b*gb, row stride lda */
  const char* in;
  int64_t lda, gt, gb;
  int in_gates;          /* this layer's input rows are its gates (x_gates, layer 0) */
  const char* gate_bias; /* [D][B][4H] added to this layer's gates, or NULL */
  /* input gates: read at G (row stride ldg); computed into Gw, or, for a
   * layer 0 whose gates the caller gave as they are, read from x (Gw NULL) */
  const char* G;
  char* Gw;
  size_t ldg;
  /* layer output */
  char* out;
  int64_t out_st, out_sb;
  /* per-direction state, io type */
  char* hbuf[2];  /* [2][B][Rs] */
  char* c[2];     /* [B][Hp] */
  char* hfull[2]; /* [B][Hp], projection only */
  /* strategy state of this layer (inproj.c) */
  uint32_t* xb; /* bf16: the input rows in bfloat16 pairs [T*B][Kp] */
  uint8_t *x6a, *x6w; /* x6: A and W split into bfloat16 (3 splits of sa / sw bytes) */
  size_t x6_sa, x6_sw;
  const float** x6rows; /* x6: W_ih's columns as rows (NULL for padding units) */
  atomic_int* x6_bad;   /* x6: a value could not be split, the layer falls back (&x6_bad_flag) */
  atomic_int x6_bad_flag;
} kl_plan;

/* Validates a's shapes against m and makes the plan; KL_ERR_ARG or
 * KL_ERR_NOMEM with nothing held. */
kl_status kl_plan_make(kl_plan* x, const kl_lstm* m, const kl_run_args* a, const kl_wih_view* wih);
/* Sets up layer l (inputs, outputs, strategy, initial states). */
void kl_plan_layer(kl_plan* x, const kl_run_args* a, int l);
/* Writes layer l's final states to a->h_n, a->c_n. */
void kl_plan_store_states(const kl_plan* x, const kl_run_args* a, int l);
void kl_plan_free(kl_plan* x);
/* The run's interrupt poll, for any thread between two pieces of work: the
 * caller's thread asks the callback (which may rate-limit itself) and sets
 * stop; returns 1 once the run is stopping. A thread that sees 1 finishes no
 * further piece; the pieces it skipped leave outputs unspecified, as the
 * interrupt allows, and the results of a run that is not stopped are unchanged. */
static inline int kl_plan_poll(const kl_plan* x) {
  if (x->interrupt && !atomic_load_explicit(x->stop, memory_order_relaxed) &&
      pthread_equal(pthread_self(), x->caller) && x->interrupt(x->interrupt_ctx))
    atomic_store(x->stop, 1);
  return atomic_load_explicit(x->stop, memory_order_relaxed);
}

/* ---- the input projection (inproj.c) ---------------------------------------
 * One table of strategies, in order of preference; each layer of a call takes
 * the first entry that applies (by the shape and the packed forms, never the
 * thread count, so results do not depend on it). */
/* Calls of at least this many rows (T * B) run their float32 input projection
 * on AMX tiles when the level allows it and kl_f32_amx_enabled(): both operands
 * are split per call, which pays only for many rows. -D overrides it. */
#ifndef KL_X6_MIN_M
#define KL_X6_MIN_M 1024
#endif
/* Below this many rows the float32 projection runs the list's kernel (f32-gemm.inc)
 * instead of BLAS, which packs W on every call. */
#define KL_F32_GEMM_MAX_M 32
typedef struct kl_inproj {
  const char* name;
  /* the packed form of W_ih it reads (KL_WIH_*), or -1 */
  int form;
  /* pack time: 1 if objects packed with these flags hold its form */
  int (*holds)(const kl_lstm* m, int flags);
  /* the form's bytes for a layer of K inputs, and direction d's rows packed into it */
  size_t (*form_bytes)(const kl_lstm* m, size_t K);
  void (*pack)(const kl_lstm* m, kl_layer* L, int d, const kl_wsrc* w);
  /* per call and layer: 1 if it computes the gates of M = T*B rows */
  int (*applies)(const kl_lstm* m, const kl_layer* L, size_t M, int in_gates);
  /* bytes of the plan's work space it needs for the layer, or NULL (none) */
  size_t (*ws_bytes)(const kl_lstm* m, const kl_layer* L, size_t M);
  /* per layer, before the pool job: points its state into the work space, or NULL */
  void (*begin)(kl_plan* x);
  /* each thread's share of a pass that must end on every thread before run
   * (the job puts a barrier after it), or NULL */
  void (*prepare)(const kl_plan* x, int ith, int nth);
  /* each thread's tiles of the gates */
  void (*run)(const kl_plan* x, int ith, int nth);
} kl_inproj;
extern const kl_inproj kl_inproj_list[];
extern const size_t kl_inproj_count;
/* The first entry from index `from` that applies, or NULL. */
const kl_inproj* kl_inproj_choose(const kl_lstm* m, const kl_layer* L, size_t M, int in_gates,
                                  size_t from);

/* ---- the recurrence (recurrence.c) ------------------------------------------ */
/* Direction d's recurrence as thread gi of its group of sp's shape (ith: the
 * thread's index in the job, for its scratch). */
void kl_run_direction(const kl_plan* x, int d, int gi, kl_split sp, int ith);

#endif /* KL_ENGINE_H */
