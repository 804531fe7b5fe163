# kvserve-generate: the command-line generator over the paged-KV-cache forward pass.
add_executable(kvserve-generate ${CMAKE_CURRENT_LIST_DIR}/generate_main.cc)
target_link_libraries(kvserve-generate PRIVATE kvserve_runner kvserve_model kvserve_tokenizer
                      absl::flags absl::flags_parse absl::flags_usage absl::flags_config absl::strings
                      nlohmann_json::nlohmann_json kvserve_build_info kvserve_warnings)

# Smoke test: the binary on the default model, greedy, a short prompt. Passes when it exits 0
# having streamed the prompt, the greedy continuation (" Paris", as the float64 reference in
# tests/model/fixtures/reference_capital.json) and both throughput lines. A missing default
# model fails it (scripts/setup.sh fetches the model).
add_test(NAME kvserve_generate_cli_test
         COMMAND sh -c [=[
out=$("$0" --prompt "The capital of France is" --max_tokens 8 2>&1); rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 0 ] || exit 1
printf '%s' "$out" | grep -q "^The capital of France is Paris" || exit 1
printf '%s' "$out" | grep -q "prompt: 5 tokens in .* tokens/s" || exit 1
printf '%s' "$out" | grep -q "decode: [0-9]* tokens in .* tokens/s" || exit 1
]=] $<TARGET_FILE:kvserve-generate>)
set_tests_properties(kvserve_generate_cli_test PROPERTIES LABELS integration TIMEOUT 300)

# --score_jsonl on the default model: " Paris" after "The capital of France is" is the greedy
# continuation (its log-likelihood near 0), " Berlin" is not and is far less likely.
add_test(NAME kvserve_generate_score_test
         COMMAND sh -c [=[
pairs=$(mktemp) || exit 1
printf '%s\n' '{"context": "The capital of France is", "continuation": " Paris"}' \
  '{"context": "The capital of France is", "continuation": " Berlin"}' > "$pairs"
out=$("$0" --score_jsonl="$pairs" 2>&1); rc=$?
rm -f "$pairs"
printf '%s\n' "$out"
[ "$rc" -eq 0 ] || exit 1
[ "$(printf '%s\n' "$out" | grep -c '^{"is_greedy":')" -eq 2 ] || exit 1
printf '%s\n' "$out" | sed -n 1p | grep -q '"is_greedy":true,"logprob":-0\.[0-9]*,"num_tokens":1}' || exit 1
printf '%s\n' "$out" | sed -n 2p | grep -q '"is_greedy":false,"logprob":-[1-9][0-9.e-]*,"num_tokens":1}' || exit 1
]=] $<TARGET_FILE:kvserve-generate>)
set_tests_properties(kvserve_generate_score_test PROPERTIES LABELS integration TIMEOUT 300)

# --chat prints the answer only: never the rendered template or its special tokens; and the
# threads flag is named as kvserve-worker's (--num_threads).
add_test(NAME kvserve_generate_chat_cli_test
         COMMAND sh -c [=[
out=$("$0" --chat "What is the capital of France?" --max_tokens 8 --num_threads 2 2>&1); rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 0 ] || exit 1
answer=$(printf '%s' "$out" | sed '/\[kvserve-generate\]/,$d')
[ -n "$(printf '%s' "$answer" | tr -d '[:space:]')" ] || exit 1
printf '%s' "$answer" | grep -q -e "<|im_start|>" -e "<|im_end|>" -e "What is the capital" && exit 1
exit 0
]=] $<TARGET_FILE:kvserve-generate>)
set_tests_properties(kvserve_generate_chat_cli_test PROPERTIES LABELS integration TIMEOUT 300)
