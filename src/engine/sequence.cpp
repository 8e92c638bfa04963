// Sequence: request state and the finish rules (length, stop tokens, EOS unless ignored).
#include "engine/detail/sequence.h"

#include <algorithm>

namespace ib::detail {

Sequence::Sequence(const GenerationRequest& request, const std::vector<int>& eos_token_ids)
    : id(request.id),
      tokens(request.prompt_tokens),
      num_prompt_tokens(static_cast<int>(request.prompt_tokens.size())),
      max_tokens(request.max_tokens),
      sampling(request.sampling),
      stop_tokens(request.stop_token_ids),
      prompt_logits_next(request.prompt_logits_from) {
  if (!request.ignore_eos)
    stop_tokens.insert(stop_tokens.end(), eos_token_ids.begin(), eos_token_ids.end());
}

void Sequence::append(int32_t token) {
  IB_ASSERT(finish == FinishReason::kNone, "Sequence::append after finish");
  tokens.push_back(token);
  if (std::find(stop_tokens.begin(), stop_tokens.end(), token) != stop_tokens.end()) {
    finish = FinishReason::kStop;
  } else if (num_output() >= max_tokens) {
    finish = FinishReason::kLength;
  }
}

}  // namespace ib::detail
