// IB_QUANT_TRIGGER and IB_QUANT_SYNC (backend/kernel_switches.h): where the activation quantize
// kernel (quant.cu's vectorised form, rows of up to 16,384 2-byte values) lets the next kernel
// launch under programmatic dependent launch: 0 right after its wait (the default), 1 once its row
// is loaded and reduced, 2 at its exit. Process-wide, like the GEMV switches in kernels.h.
#pragma once

namespace ib::cuda {

void set_quant_trigger(int where);
int quant_trigger();
// IB_QUANT_SYNC: a quantized decode GEMV waits for the quantize (W8A8) or norm (W8A16, 4-bit)
// kernel launched before it by a flag its blocks count into (kernels.h, GemvQuantAct::sync)
// instead of for its grid's end: 0 no (the default), 1 yes, the quantize kernel triggering as
// IB_QUANT_TRIGGER says (the norm kernel right after its wait), 2 yes, that kernel triggering
// before its own wait (the GEMV's blocks launch, and stream their first weights, while the kernel
// before it runs).
void set_quant_sync(int mode);
int quant_sync();

}  // namespace ib::cuda
