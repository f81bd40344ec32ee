#!/usr/bin/env python3
"""A data-parallel PyTorch program that reports live to Meshbench (README: "Observe a PyTorch run").

Run it with `meshbench-engine run docs/examples/observed_dp.json`: the engine starts one process per
rank under mpirun, and the Monitor, findings and export see what it reports like any run.
"""
import json
import os

import torch
import torch.distributed as dist

import meshbench


def main():
    rank, world = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    with open(meshbench.job_spec_path()) as spec:
        train = json.load(spec)["train"]  # the job spec the engine runs this program for
    torch.manual_seed(train["seed"])  # the same initial weights on every replica
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=train["lr"])
    data = torch.Generator().manual_seed(train["seed"] + rank)  # each replica its own batches

    with meshbench.connect() as mb:
        for _ in range(train["steps"]):
            x = torch.randn(64, 32, generator=data)
            y = x.sum(dim=1, keepdim=True)
            with mb.op("F", microbatch=0):
                loss = torch.nn.functional.mse_loss(model(x), y)
            with mb.op("B", microbatch=0):
                loss.backward()
            with mb.op("dp-reduce"):
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= world
            with mb.op("optimizer"):
                optimizer.step()
                optimizer.zero_grad()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            mb.step(loss=mean.item() / world, tokens=64 * world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
