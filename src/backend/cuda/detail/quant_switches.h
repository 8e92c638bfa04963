// IB_QUANT_TRIGGER (backend/kernel_switches.h): where the activation quantize kernel (quant.cu's
// vectorised form, rows of up to 16,384 2-byte values) lets the next kernel launch under
// programmatic dependent launch: 0 right after its wait (the default), 1 once its row is loaded
// and reduced, 2 at its exit. Process-wide, like the GEMV switches in kernels.h.
#pragma once

namespace ib::cuda {

void set_quant_trigger(int where);
int quant_trigger();

}  // namespace ib::cuda
