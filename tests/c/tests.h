/* The groups of the C test, one file each; main.c runs them in this order.
 * Each group counts its checks through harness.h. */
#ifndef KL_TEST_TESTS_H
#define KL_TEST_TESTS_H

#include "lstm.h"

/* threads and the kept work buffers (test_threads.c) */
void test_thread_cap(void);
void test_scratch(void);
void test_dense_threads_for_work(void);
/* kl_run_args.interrupt (test_interrupt.c) */
void test_interrupt(void);
/* argument checks of the handle API (test_args.c) and of kl_lstm_forward's gate
 * input (test_gate.c) */
void test_bad_args(void);
void test_gate_args(void);
/* every kernel of every list against the scalar one, and the dispatch (test_kernel_lists.c) */
void test_kernel_lists(void);
void test_dispatch(const char* isa);
/* the dense operators (test_dense_matmul.c, test_dense_conv.c, test_dense_attention.c) */
void test_dense_matmul(void);
void test_dense_matmul_split(void);
void test_dense_matmul_panels(void);
void test_dense_matmul_panels_aliased_rows(void);
void test_dense_conv1d_panels(void);
void test_dense_conv_phases(void);
void test_dense_attention(void);
/* their entries over DLTensors (test_dense_forward.c) */
void test_dense_forward(void);
/* counter-based random numbers (test_random.c), instance norm (test_norm.c) */
void test_random(void);
void test_instance_norm(void);
/* the CUDA backend's plan, no GPU needed (test_cuda_plan.c) */
void test_cuda_plan(void);

/* the LSTM against the double reference, per ISA (test_lstm.c) */
void test_activations(const char* isa);
void test_case(const tcase* c, kl_dtype dt, const char* isa);
void test_concurrent(const char* isa);
/* what test_case runs on each case: the one entry and its cache
 * (test_forward_cache.c), the caller's gate input (test_gate.c) */
void test_forward_entry(const model* m, const run_input* in, const result* r1, const char* tag);
void test_gate_input(const model* m, kl_dtype dt, const double* x, const int64_t* len, int use_len,
                     const double* h0, const double* c0, const char* tag);

#endif
