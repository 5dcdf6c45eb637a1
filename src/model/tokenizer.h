// Tokenizers built from GGUF metadata: byte-level BPE (tokenizer.ggml.model = "gpt2", with
// the pre-tokenizer named by tokenizer.ggml.pre) and SentencePiece-style BPE ("llama").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace sieve {

class GgufFile;

enum class TokenType : int32_t {
  undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6,
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Builds the tokenizer a file describes; an unsupported model/pre-tokenizer is an error.
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& f);

  // parse_special: control and user-defined token texts inside `text` become their ids
  // (chat templates need this); otherwise they are tokenized as plain text.
  // add_bos: prepend BOS when the model asks for it (add_bos_token).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos,
                                      bool parse_special) const = 0;
  // The bytes a token stands for (byte tokens -> the byte; control tokens -> "" unless
  // render_special). Pieces may be partial UTF-8: concatenate before printing.
  virtual std::string token_to_piece(int32_t id, bool render_special = false) const = 0;
  std::string decode(std::span<const int32_t> ids, bool render_special = false) const;

  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  // End of generation: eos, eot, <|im_end|>/<end_of_turn>-style tokens named by metadata.
  bool is_eog(int32_t id) const;
  TokenType token_type(int32_t id) const;
  const std::string& token_text(int32_t id) const { return tokens_[id]; }
  const std::string& chat_template() const { return chat_template_; }

 protected:
  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::vector<int32_t> eog_ids_;
  int32_t bos_ = -1;
  int32_t eos_ = -1;
  bool add_bos_ = false;
  std::string chat_template_;
};

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

// Renders messages with the model's chat template. Templates are recognised by their
// structure (ChatML as SmolLM2 uses, Gemma's <start_of_turn>), not by running Jinja; an
// unrecognised template is an error naming the fix (--chat off, or a known template).
Result<std::string> apply_chat_template(const Tokenizer& tok, std::span<const ChatMessage> msgs,
                                        bool add_generation_prompt);

}  // namespace sieve
