-- Headless Neovim as a real LSP client: start `python -m daic.compiler.lsp`, attach it to the buffer,
-- wait for its diagnostics and write them, one per line, to $DAIC_OUT. (vim.lsp.start_client and
-- buf_attach_client exist since Neovim 0.5, so this runs on Debian's 0.7 and on later releases.)
local out = assert(io.open(os.getenv("DAIC_OUT"), "w"))
local client_id = vim.lsp.start_client({
  name = "daic",
  cmd = { os.getenv("DAIC_PYTHON"), "-m", "daic.compiler.lsp" },
  root_dir = vim.fn.getcwd(),
})
local bufnr = vim.api.nvim_get_current_buf()
vim.lsp.buf_attach_client(bufnr, client_id)
local arrived = vim.wait(20000, function()
  return #vim.diagnostic.get(bufnr) > 0
end, 20)
out:write(arrived and "received\n" or "timeout\n")
for _, d in ipairs(vim.diagnostic.get(bufnr)) do
  -- Neovim keeps the LSP code on the diagnostic (0.8+) or in user_data (0.7).
  local code = d.code or (d.user_data and d.user_data.lsp and d.user_data.lsp.code) or "?"
  local message = d.message:gsub("\n", " | ")
  out:write(string.format("%d:%d-%d:%d %s %s\n", d.lnum, d.col, d.end_lnum, d.end_col, code, message))
end
out:close()
vim.lsp.stop_client(client_id)
vim.cmd("qa!")
