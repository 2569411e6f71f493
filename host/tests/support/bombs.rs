//! Generated compile bombs: components whose one core module is built to take Cranelift's
//! memory and time. Shared by `tests/compile_bomb.rs` and `examples/compile_bombs.rs`.

use wasm_encoder::{
    CodeSection, Component, Function, FunctionSection, Instruction, Module, ModuleSection,
    TypeSection, ValType,
};

fn wrap(module: &Module) -> Vec<u8> {
    let mut component = Component::new();
    component.section(&ModuleSection(module));
    component.finish()
}

/// A core module of `functions` functions, each with `locals` i64 locals that are all set at
/// the start and all read at the end, so all of them are live across the `blocks` conditional
/// branches in between: liveness is `locals * blocks` for the register allocator.
pub fn bomb(functions: u32, locals: u32, blocks: u32) -> Vec<u8> {
    let mut types = TypeSection::new();
    types.ty().function([ValType::I32], [ValType::I64]);
    let mut funcs = FunctionSection::new();
    let mut code = CodeSection::new();
    for _ in 0..functions {
        funcs.function(0);
        let mut f = Function::new([(locals, ValType::I64)]);
        for i in 1..=locals {
            f.instruction(&Instruction::LocalGet(0));
            f.instruction(&Instruction::I64ExtendI32U);
            f.instruction(&Instruction::I64Const(i64::from(i)));
            f.instruction(&Instruction::I64Add);
            f.instruction(&Instruction::LocalSet(i));
        }
        for _ in 0..blocks {
            f.instruction(&Instruction::Block(wasm_encoder::BlockType::Empty));
            f.instruction(&Instruction::LocalGet(0));
            f.instruction(&Instruction::BrIf(0));
            f.instruction(&Instruction::End);
        }
        f.instruction(&Instruction::I64Const(0));
        for i in 1..=locals {
            f.instruction(&Instruction::LocalGet(i));
            f.instruction(&Instruction::I64Add);
        }
        f.instruction(&Instruction::End);
        code.function(&f);
    }
    let mut module = Module::new();
    module.section(&types).section(&funcs).section(&code);
    wrap(&module)
}
